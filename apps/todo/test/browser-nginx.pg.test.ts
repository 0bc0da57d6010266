import { defineFlows } from './flows.js'

// Item 12: the same flows with nginx (deploy/nginx.conf, a caching CDN) between the browser and Sluice.
defineFlows('todo app, shapes through nginx as a caching CDN', { viaNginx: true, screenshot: false })
