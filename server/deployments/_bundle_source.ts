/** A bundle on its way into the store, and the size of the pieces it is read and stored in. */
/** A bundle to store: its content address, its length, and its bytes read in order, a chunk at a time. */
export interface BundleSource {
  digest: string;
  size: number;
  /**
   * The bytes as chunks of at most `BUNDLE_CHUNK_BYTES` (each stored as one row, and unpacked to check
   * the bundle). A chunk may be overwritten once the next is asked for: its consumer is done with it by then.
   */
  chunks(): AsyncIterable<Uint8Array>;
  /** Where its bytes are already a file (a spooled upload), to be linked rather than copied. */
  path?: string;
}

/** The bytes of one row of `bundle_chunks`: small enough for any driver, few enough rows per bundle. */
export const BUNDLE_CHUNK_BYTES = 64 * 1024;
