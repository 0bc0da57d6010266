import { defineSharedViewFlow } from './shared-flow.js'

// The "Shared with me" view, whose lists and todos are shapes with subqueries.
defineSharedViewFlow('todo app, the "Shared with me" view (subquery shapes), from Sluice directly', { viaNginx: false })
