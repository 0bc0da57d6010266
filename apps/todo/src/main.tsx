import { LocalStorageShapeStorage } from '@sluice/client'
import { ShapeCache, ShapeCacheProvider } from '@sluice/react'
import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import { loadConfig } from './api'
import { App } from './App'
import { RequestMonitor } from './connection'
import './styles.css'

const root = createRoot(document.getElementById('root')!)

try {
  // Where Sluice (or a CDN in front of it) is comes from the server, so one build runs anywhere.
  const { shapeUrl } = await loadConfig()
  // Shapes are saved in localStorage at every sync point, so a reload shows the rows at once and
  // resumes from the saved offset instead of downloading everything again.
  const monitor = new RequestMonitor()
  const cache = new ShapeCache({ storage: new LocalStorageShapeStorage({ prefix: 'sluice-todo:' }), defaults: { fetch: monitor.fetch } })
  root.render(
    <StrictMode>
      <ShapeCacheProvider cache={cache}>
        <App shapeUrl={shapeUrl} monitor={monitor} />
      </ShapeCacheProvider>
    </StrictMode>,
  )
} catch (error) {
  root.render(
    <div className="empty error-box">
      <h2>Could not start</h2>
      <p>{String(error)}</p>
    </div>,
  )
}
