import { defineFlows } from './flows.js'

// Items 10, 11 and 13: the app reading shapes from Sluice itself.
defineFlows('todo app, shapes from Sluice directly', { viaNginx: false, screenshot: true })
