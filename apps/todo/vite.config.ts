import react from '@vitejs/plugin-react'
import { defaultClientConditions, defineConfig } from 'vite'

/** Where `npm run dev` sends /api when the API runs on its own (server/demo.ts prints its port). */
const DEV_API = process.env['TODO_API_URL'] ?? 'http://127.0.0.1:4000'

export default defineConfig({
  plugins: [react()],
  // The workspace packages are bundled from their TypeScript sources: nothing to build first.
  resolve: { conditions: ['sluice-source', ...defaultClientConditions] },
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: true },
  server: { proxy: { '/api': DEV_API } },
})
