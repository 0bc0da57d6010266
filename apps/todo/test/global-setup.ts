import { fileURLToPath } from 'node:url'
import type { TestProject } from 'vitest/node'
import { build } from 'vite'

/** The app as `npm start` serves it: a production build, made once for every test file. */
export const APP_DIR = fileURLToPath(new URL('../test-results/app', import.meta.url))

export default async function setup(project: TestProject): Promise<void> {
  await build({
    root: fileURLToPath(new URL('..', import.meta.url)),
    configFile: fileURLToPath(new URL('../vite.config.ts', import.meta.url)),
    logLevel: 'warn',
    build: { outDir: APP_DIR, emptyOutDir: true, sourcemap: false },
  })
  project.provide('appDir', APP_DIR)
}

declare module 'vitest' {
  export interface ProvidedContext {
    appDir: string
  }
}
