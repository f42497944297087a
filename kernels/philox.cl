/* Philox-4x32-10, bit for bit as backends/philox.h (the host's): a draw depends only on
 * (seed, stream, sample, element), so dropout masks match every backend. */

/* One Philox-4x32-10 block: ctr (four words) in place under key (k0, k1). */
BT_FN void philox4x32(uint ctr[4], uint k0, uint k1) {
    for (int round = 0; round < 10; round++) {
        const uint hi0 = mul_hi(0xD2511F53u, ctr[0]), lo0 = 0xD2511F53u * ctr[0];
        const uint hi1 = mul_hi(0xCD9E8D57u, ctr[2]), lo1 = 0xCD9E8D57u * ctr[2];
        const uint c1 = ctr[1], c3 = ctr[3];
        ctr[0] = hi1 ^ c1 ^ k0;
        ctr[1] = lo1;
        ctr[2] = hi0 ^ c3 ^ k1;
        ctr[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Word q (0-3) of a Philox block, selected rather than indexed: an index
 * known only at run time puts the block in local memory (CUDA). Two levels
 * of selects on q's bits, not a chain on q's value: Oclgrind 21.10 gets the
 * chain wrong where it is unrolled into a row kernel's loop (PoCL and the
 * emulated CUDA device do not). */
BT_FN uint philox_word(const uint r[4], uint q) {
    const uint lo = q & 1u ? r[1] : r[0], hi = q & 1u ? r[3] : r[2];
    return q & 2u ? hi : lo;
}

/* Whether dropout keeps element i (counted over all samples of per_sample
 * elements from sample first_sample): the draw dropout makes for it. */
BT_FN bool drop_keep(size_t i, ulong per_sample, uint first_sample, uint thr, uint seed_lo,
                     uint seed_hi, uint stream_lo, uint stream_hi) {
    const size_t s = i / per_sample, e = i % per_sample;
    uint r[4] = {(uint)(e >> 2), first_sample + (uint)s, stream_lo, stream_hi};
    philox4x32(r, seed_lo, seed_hi);
    return philox_word(r, (uint)(e & 3)) >= thr;
}

/* The Philox block of dropout's work-item blk (four consecutive elements of
 * one sample, blocks_per_sample to a sample of per_sample elements) drawn
 * into r: *e0 gets the block's first element within its sample; returns the
 * sample's first element. */
BT_FN size_t drop_block(size_t blk, ulong per_sample, ulong blocks_per_sample, uint first_sample,
                        uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi, uint r[4],
                        size_t *e0) {
    const size_t s = blk / blocks_per_sample;
    *e0 = (blk % blocks_per_sample) * 4;
    r[0] = (uint)(*e0 >> 2);
    r[1] = first_sample + (uint)s;
    r[2] = stream_lo;
    r[3] = stream_hi;
    philox4x32(r, seed_lo, seed_hi);
    return s * per_sample;
}

/* Whether dropout keeps element e of sample `sample` (counted from
 * first_sample): drop_keep's draw, from the Philox block in r when *drawn
 * says r holds it (e / 4), else drawn into r. Start with *drawn = ~0: keys
 * that share a block then draw it once. */
BT_FN bool drop_keep_at(uint sample, ulong e, uint first_sample, uint thr, uint seed_lo,
                        uint seed_hi, uint stream_lo, uint stream_hi, ulong *drawn, uint r[4]) {
    if (e >> 2 != *drawn) {
        r[0] = (uint)(e >> 2);
        r[1] = first_sample + sample;
        r[2] = stream_lo;
        r[3] = stream_hi;
        philox4x32(r, seed_lo, seed_hi);
        *drawn = e >> 2;
    }
    return philox_word(r, (uint)(e & 3)) >= thr;
}
