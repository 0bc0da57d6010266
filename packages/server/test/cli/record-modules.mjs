// Preloaded through NODE_OPTIONS (--import) into every Node process a start spawns (pnpm, turbo's tasks,
// the server): in the one that runs the Sluice CLI or the todo demo, it records every module URL Node
// resolves into the file named by RECORD_MODULES_FILE, so a test can see what that process ran.
import { register } from 'node:module'

const file = process.env.RECORD_MODULES_FILE
if (file !== undefined && /(bin\/sluice\.js|dist-server\/demo\.js|server\/demo\.ts)$/.test(process.argv[1] ?? '')) {
  register(new URL('./record-modules-hook.mjs', import.meta.url), { data: { file } })
}
