export * from './offset.js'
