/* CRC-32C (Castagnoli), as TFRecord's framing uses it: SSE4.2's crc32
 * instruction where the CPU has it, else slicing-by-8 tables.
 *
 * Mirrors bertprep/formats/crc32c.py (_python_crc32c, masked_crc32c); equal by
 * tests/test_native.py::test_crc32c_check_value_and_twin, and through the
 * TFRecord CRCs by test_encode_instances_reproduces_golden_files and
 * test_split_records_matches_the_python_reader.
 */
#include "native.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_CRC 1
#include <nmmintrin.h>
#endif

static uint32_t crc_table[8][256];
static int crc_use_hardware = 0;

const char *crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    crc_use_hardware = __builtin_cpu_supports("sse4.2");
#endif
    return crc_use_hardware ? "sse4.2" : "slicing-by-8";
}

/* Slicing-by-8 over the raw (not pre/post-inverted) register. */
static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_SSE42_CRC
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data;
    crc ^= 0xFFFFFFFFu;
#ifdef HAVE_SSE42_CRC
    if (crc_use_hardware)
        return crc_hardware(crc, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc_software(crc, p, n) ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void *data, size_t n)
{
    uint32_t crc = crc32c_update(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
