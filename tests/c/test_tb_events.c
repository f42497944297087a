/* The CRC of TensorBoard's record framing (tb_events.h): ISA-L's CRC32C
 * with the inversions the standard defines, against the check values of
 * CRC-32C (the nine ASCII digits "123456789", and RFC 3720's 32 zero bytes
 * and 32 bytes 0xff), then TFRecord's mask applied to each. */
#include "train/tb_events.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

/* The mask TFRecord puts on a CRC: rotate right by 15, add a constant. */
static uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void check_vector(const void *p, size_t n, uint32_t crc32c, const char *what) {
    const uint32_t got = tb_masked_crc32c(p, n), want = mask(crc32c);
    const int ok = got == want;
    printf("%s masked CRC32C of %s: %08x (CRC32C %08x, masked %08x)\n", ok ? "ok  " : "FAIL",
           what, got, crc32c, want);
    if (!ok) failures++;
}

int main(void) {
    unsigned char zeros[32], ones[32];
    memset(zeros, 0, sizeof zeros);
    memset(ones, 0xff, sizeof ones);
    check_vector("123456789", 9, 0xe3069283u, "\"123456789\"");
    check_vector(zeros, sizeof zeros, 0x8a9136aau, "32 zero bytes");
    check_vector(ones, sizeof ones, 0x62a8ab43u, "32 bytes 0xff");
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
