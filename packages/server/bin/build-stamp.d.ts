/** Where a build writes its digest of the sources, relative to the package's directory. */
export declare const STAMP: string
/** A digest of the path and bytes of every .ts/.tsx source under `<packageDir>/src` (test files excluded). */
export declare function sourceDigest(packageDir: string): string
/** Writes `<packageDir>/dist/.source-digest` for the sources there now (the last step of a build). */
export declare function writeStamp(packageDir: string): void
/** Undefined when `<packageDir>/dist` is the build of the sources there now, else why not. */
export declare function staleReason(packageDir: string): string | undefined
