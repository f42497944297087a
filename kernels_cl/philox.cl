/* Philox-4x32-10, bit for bit as backends/philox.h: a draw depends only on
 * (seed, stream, sample, element), so dropout masks match every backend. */

/* One Philox-4x32-10 block: ctr (four words) in place under key (k0, k1). */
void philox4x32(uint ctr[4], uint k0, uint k1) {
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
