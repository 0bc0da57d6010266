export { ADDON_PATH, type SendfileLoad, loadSendfile } from './load-sendfile.js'
export type { SendfileStats } from './native.js'
export { FileSender, Sendfile, SendfileError } from './sendfile.js'
export { type AnswerOutcome, SocketParking } from './parking.js'
