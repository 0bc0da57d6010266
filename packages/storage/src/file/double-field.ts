/**
 * The first value of a number field that will ever hold more than a small
 * integer: `-0`, the one number literal V8 never keeps as a small integer. A
 * field whose first value is a heap number is laid out as a double field from
 * the object's construction; the constructor then sets the real start value.
 *
 * Why: a field that starts with small integers and later takes any other
 * number (an arena handle, an LSN's low half at or above 2^31, a position past
 * 2 GiB, or a whole number that arithmetic left as a double) changes its
 * class's layout, and every object made before is migrated on its next use:
 * a runtime call and a fresh heap number per such field, stored into an old
 * object for the next scavenges to find. With many logs that would be every
 * log's first append after an open.
 */
export const DOUBLE_FIELD = -0
