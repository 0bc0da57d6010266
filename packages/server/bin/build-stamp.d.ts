/** Where a build writes its digest of the sources, relative to the package's directory. */
export declare const STAMP: string
/** A digest of the path and bytes of every .ts/.tsx source under `<packageDir>/src` (test files excluded). */
export declare function sourceDigest(packageDir: string): string
/** Writes `<packageDir>/dist/.source-digest` for the sources there now (the last step of a build). */
export declare function writeStamp(packageDir: string): void
/** Undefined when `<packageDir>/dist` is the build of the sources there now, else why not. */
export declare function staleReason(packageDir: string): string | undefined
/** The CLI's bundle (dist/main.js and the @sluice packages it imports, in one file), relative to the package's directory. */
export declare const BUNDLE: string
/** Beside the bundle: the build stamp of each package it holds, by name. */
export declare const BUNDLE_SOURCES: string
/** Records the stamps of the bundled packages (`packages`: name to directory). */
export declare function writeBundleSources(packageDir: string, packages: ReadonlyMap<string, string>): void
/** Undefined when the bundle holds the builds each package's stamp describes now (`packages`: name to installed directory), else why not. */
export declare function staleBundle(packageDir: string, packages: ReadonlyMap<string, string>): string | undefined
