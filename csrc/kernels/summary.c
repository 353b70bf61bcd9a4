/* summary.c: the Summary protocol buffer of TensorBoard, PNG images and the CRCs of event files
 * (ksummary.h).  Encoders count when out is NULL and write when it is not, through one cursor
 * (wbuf), so the size a caller allocates is exactly the size written.  Nested messages are
 * written length first: their body is counted by a first pass of the same function.
 * Byte order: the wire format and PNG fix it (protobuf little-endian, PNG big-endian), so
 * multi-byte values are written byte by byte, whatever the host.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kernels/ksummary.h"
#include "kernels/histogram_table.h"
#include "io/pb_varint.h"

static const uint32_t crc32_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

static const uint32_t crc32c_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu,
    0x26a1e7e8u, 0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu,
    0x4d43cfd0u, 0xbf284cd3u, 0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu,
    0xf165b798u, 0x030e349bu, 0xd7c45070u, 0x25afd373u, 0x36ff2087u, 0xc494a384u,
    0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u, 0x5d1d08bfu, 0xaf768bbcu,
    0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u, 0x33ed7d2au,
    0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau,
    0x30e349b1u, 0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu,
    0x1642ae59u, 0xe4292d5au, 0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au,
    0x7da08661u, 0x8fcb0562u, 0x9c9bf696u, 0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu,
    0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u, 0x67dafa54u, 0x95b17957u,
    0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu, 0xfe53516fu,
    0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu,
    0x3ac7f2ebu, 0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u,
    0x61c69362u, 0x93ad1061u, 0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu,
    0x4767748au, 0xb50cf789u, 0xeb1fcbadu, 0x197448aeu, 0x0a24bb5au, 0xf84f3859u,
    0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u, 0x7198540du, 0x83f3d70eu,
    0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u, 0xa55230e6u,
    0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu,
    0x456cac67u, 0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u,
    0xe9141340u, 0x1b7f9043u, 0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu,
    0x92a8fc17u, 0x60c37f14u, 0x73938ce0u, 0x81f80fe3u, 0x55326b08u, 0xa759e80bu,
    0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu, 0xf94ad42fu, 0x0b21572cu,
    0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u, 0x502036a5u,
    0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u,
    0x0e330a81u, 0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du,
    0x758fe5d6u, 0x87e466d5u, 0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u,
    0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u, 0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu,
    0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u, 0x0417b1dbu, 0xf67c32d8u,
    0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu, 0x5a048dffu,
    0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u,
    0x590ab964u, 0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u,
    0x7fab5e8cu, 0x8dc0dd8fu, 0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu,
    0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u, 0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u,
    0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u, 0x4f48173du, 0xbd23943eu,
    0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au, 0xc69f7b69u,
    0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

static uint32_t crc_update(const uint32_t *table, uint32_t crc, const void *data, size_t n) {
  const uint8_t *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}
uint32_t npuK_crc32(uint32_t crc, const void *data, size_t n) {
  return crc_update(crc32_table, crc, data, n);
}
uint32_t npuK_crc32c_ref(uint32_t crc, const void *data, size_t n) {
  return crc_update(crc32c_table, crc, data, n);
}

/* SSE 4.2's crc32 instruction is CRC-32C's reflected update (without the inversions), eight
   bytes at a time: about 20 times the table's speed, which reads a byte per step through a
   chain of dependent loads (an event file's records are checksummed whole, twice). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *data,
                                                               size_t n) {
  const uint8_t *p = data;
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word; /* little-endian: the byte order the reflected CRC consumes */
    memcpy(&word, p, sizeof word);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n; n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

uint32_t npuK_crc32c(uint32_t crc, const void *data, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("sse4.2")) return crc32c_sse42(crc, data, n);
#endif
  return npuK_crc32c_ref(crc, data, n);
}
uint32_t npuK_crc32c_masked(const void *data, size_t n) {
  uint32_t c = npuK_crc32c(0, data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- the cursor: counts always, writes when p != NULL ---------------------------------- */

typedef struct wbuf {
  uint8_t *p;
  size_t n;
} wbuf;

static void put_byte(wbuf *b, uint8_t v) {
  if (b->p) b->p[b->n] = v;
  b->n++;
}
static void put_raw(wbuf *b, const void *data, size_t n) {
  if (b->p && n) memcpy(b->p + b->n, data, n);
  b->n += n;
}
static void put_varint(wbuf *b, uint64_t v) {
  b->n += b->p ? npuI_pb_encode_varint(b->p + b->n, v) : npuI_pb_varint_size(v);
}
static void put_tag(wbuf *b, uint32_t field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }
static void put_le(wbuf *b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) put_byte(b, (uint8_t)(v >> (8 * i)));
}
static void put_be32(wbuf *b, uint32_t v) {
  for (int i = 3; i >= 0; i--) put_byte(b, (uint8_t)(v >> (8 * i)));
}
static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
/* proto3: a double outside a oneof is left out when its bits are zero (+0.0). */
static void put_double(wbuf *b, uint32_t field, double d) {
  if (!double_bits(d)) return;
  put_tag(b, field, 1);
  put_le(b, double_bits(d), 8);
}
static void put_bytes(wbuf *b, uint32_t field, const void *data, size_t n) {
  put_tag(b, field, 2);
  put_varint(b, n);
  put_raw(b, data, n);
}
static void put_int(wbuf *b, uint32_t field, int64_t v) {
  if (!v) return;
  put_tag(b, field, 0);
  put_varint(b, (uint64_t)v);
}

/* A Summary holding one Value whose body `body` writes: field 1 of the Summary, the length
   of the body (counted first), the body. */
typedef void (*body_fn)(wbuf *b, const void *arg);
static void put_message(wbuf *b, uint32_t field, body_fn body, const void *arg) {
  wbuf count = {NULL, 0};
  body(&count, arg);
  put_tag(b, field, 2);
  put_varint(b, count.n);
  body(b, arg);
}

/* ---- scalar ------------------------------------------------------------------------------ */

typedef struct scalar_arg {
  const char *tag;
  float value;
} scalar_arg;

static void scalar_body(wbuf *b, const void *arg) {
  const scalar_arg *a = arg;
  uint32_t bits;
  memcpy(&bits, &a->value, sizeof bits);
  put_bytes(b, 1, a->tag, strlen(a->tag));
  put_tag(b, 2, 5); /* simple_value is in a oneof: written even when 0 */
  put_le(b, bits, 4);
}

size_t npuK_summary_scalar(uint8_t *out, const char *tag, float value) {
  wbuf b = {out, 0};
  scalar_arg a = {tag, value};
  put_message(&b, 1, scalar_body, &a);
  return b.n;
}

/* ---- histogram --------------------------------------------------------------------------- */

/* histogram.cc's InitDefaultBuckets: v = 1e-12, times 1.1 while below 1e20.  The rule, which
   the reference path follows; the device path reads the same limits from histogram_table.h
   (tools/gen_histogram_table.c computes them this way), and npuK_histogram_check_tables
   compares the two. */
static int positive_limits(double *out) {
  int n = 0;
  for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) {
    if (out) out[n] = v;
    n++;
  }
  return n;
}

_Static_assert(2 * HISTO_K1 + 1 == NPUK_HISTOGRAM_N_LIMITS, "histogram_table.h is stale");

void npuK_histogram_limits(double *limits) {
  int k = positive_limits(NULL);
  double *pos = limits + k + 2; /* -DBL_MAX, -v[k-1] .. -v[0], 0, v[0] .. v[k-1], DBL_MAX */
  positive_limits(pos);
  pos[k] = DBL_MAX;
  for (int i = 0; i <= k; i++) limits[i] = -pos[k - i];
  limits[k + 1] = 0.0;
}

/* Limit b of the default ones, from the table: the K1 positive limits (DBL_MAX the last) are
   at K1 + 1 + i, 0 at K1, their negatives at K1 - 1 - i. */
static double limit_of(int b) {
  if (b < HISTO_K1) return -histo_positive[HISTO_K1 - 1 - b];
  return b == HISTO_K1 ? 0.0 : histo_positive[b - HISTO_K1 - 1];
}

int npuK_histogram_check_tables(void) {
  double limits[NPUK_HISTOGRAM_N_LIMITS];
  if (positive_limits(NULL) + 1 != HISTO_K1) return 0;
  npuK_histogram_limits(limits);
  for (int b = 0; b < NPUK_HISTOGRAM_N_LIMITS; b++)
    if (double_bits(limits[b]) != double_bits(limit_of(b))) return 0;
  for (int s = 0, i = 0; s < HISTO_SLICES; s++) {
    uint64_t bits = (uint64_t)((s >> HISTO_SLICE_BITS) + HISTO_SLICE_EMIN + 1023) << 52 |
                    (uint64_t)(s & ((1 << HISTO_SLICE_BITS) - 1)) << (52 - HISTO_SLICE_BITS);
    double lower;
    memcpy(&lower, &bits, sizeof lower);
    while (i < HISTO_K1 && histo_positive[i] < lower) i++;
    if (histo_start[s] != i) return 0;
    /* a slice holds at most one limit, so that one compare finds a value's bucket */
    if (s > 0 && histo_start[s] - histo_start[s - 1] > 1) return 0;
  }
  /* the slices span the finite limits: below the first, 0 of them; past the last slice's
     octave, all but DBL_MAX */
  return histo_start[0] == 0 && histo_start[HISTO_SLICES - 1] == HISTO_K1 - 1 &&
         histo_positive[HISTO_K1 - 2] < ldexp(1.0, HISTO_SLICE_EMAX + 1) &&
         histo_positive[0] >= ldexp(1.0, HISTO_SLICE_EMIN + 1);
}

/* The first index whose limit is > v, by bisection: the reference for bucket_of below. */
static int bucket_bisect(double v, int n_limits, const double *limits) {
  int lo = 0, hi = n_limits - 1; /* the last limit, DBL_MAX, is > every finite value but itself */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (limits[mid] > v) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

static int64_t first_non_finite(int64_t n, const double *x) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return -1;
}

static int histo_walk(const npuK_histo *h, const uint64_t *counts, uint8_t *limits,
                      uint8_t *counts_out);

static void histo_start_stats(npuK_histo *h) {
  *h = (npuK_histo){.min = DBL_MAX, .max = -DBL_MAX, .first = 1, .last = 0};
}

int64_t npuK_histogram_ref(int64_t n, const double *x, const double *limits, npuK_histo *h,
                           uint64_t *counts) {
  int n_limits = NPUK_HISTOGRAM_N_LIMITS;
  histo_start_stats(h);
  for (int i = 0; i < n_limits; i++) counts[i] = 0;
  int64_t bad = first_non_finite(n, x);
  if (bad >= 0) return bad;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    counts[bucket_bisect(v, n_limits, limits)]++;
    if (v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    h->num += 1;
    h->sum += v;
    h->sum_squares += v * v;
  }
  if (n > 0) {
    h->first = bucket_bisect(h->min, n_limits, limits);
    h->last = bucket_bisect(h->max, n_limits, limits);
  }
  h->n_entries = histo_walk(h, counts, NULL, NULL);
  return -1;
}

/* v's bucket, the first whose limit is > v, without a branch (a value's sign and size are as
   random as the value).  The limits are symmetric around 0: with p the K1 positive ones,
   the bucket is K1 + 1 + c for v >= 0 (-0 included), c = #{p <= v}, and K1 - c for v < 0,
   c = #{p < -v}; c is at most K1 - 1 (DBL_MAX itself goes to the last bucket).  c comes
   from the slice of |v| (histo_start: its binary exponent and top mantissa bits, clamped to
   the table's range) and one compare with the only limit the slice may hold, made on the
   bits (positive doubles order as their bits; p < |v| is p + 1 <= |v|).  An infinity or a
   NaN lands in some valid bucket: the caller sees it in the sum. */
static inline int bucket_of(double v) {
  uint64_t u = double_bits(v) & ~(1ull << 63);
  int64_t s = (int64_t)(u >> (52 - HISTO_SLICE_BITS)) -
              ((int64_t)(1023 + HISTO_SLICE_EMIN) << HISTO_SLICE_BITS);
  s = s < 0 ? 0 : s;
  s = s < HISTO_SLICES - 1 ? s : HISTO_SLICES - 1;
  int c = histo_start[s], neg = v < 0;
  c += double_bits(histo_positive[c]) + (uint64_t)neg <= u;
  c = c < HISTO_K1 - 1 ? c : HISTO_K1 - 1;
  return neg ? HISTO_K1 - c : HISTO_K1 + 1 + c;
}

/* The running statistics of one pass, kept in locals by the loops (counts may alias nothing,
   but the compiler cannot know). */
typedef struct histo_pass {
  uint64_t *counts;
  double lo, hi, sum, sum_squares;
} histo_pass;

/* Counts x[0..n) (T float or double) into a: one read of each value, its bucket and the
   statistics together.  Finiteness is not checked here: an infinity or a NaN makes the sum
   infinite or NaN, and only then does the caller look for it. */
#define HISTO_PASS(NAME, T)                                                                    \
  static void NAME(histo_pass *a, int64_t n, const T *x) {                                     \
    uint64_t *counts = a->counts;                                                               \
    double lo = a->lo, hi = a->hi, sum = a->sum, sum_squares = a->sum_squares;                 \
    for (int64_t i = 0; i < n; i++) {                                                           \
      double v = (double)x[i];                                                                  \
      counts[bucket_of(v)]++;                                                                   \
      lo = v < lo ? v : lo;                                                                     \
      hi = v > hi ? v : hi;                                                                     \
      sum += v;                                                                                 \
      sum_squares += v * v;                                                                     \
    }                                                                                           \
    a->lo = lo, a->hi = hi, a->sum = sum, a->sum_squares = sum_squares;                         \
  }
HISTO_PASS(pass_f64, double)
HISTO_PASS(pass_f32, float)

static int64_t first_non_finite_f32(int64_t n, const float *x) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return -1;
}

int64_t npuK_histogram(int64_t n, npuK_dtype dtype, const void *x, npuK_histo *h,
                       uint64_t *counts) {
  memset(counts, 0, sizeof *counts * NPUK_HISTOGRAM_N_LIMITS);
  histo_start_stats(h);
  histo_pass a = {counts, DBL_MAX, -DBL_MAX, 0, 0};
  int64_t bad = -1;
  if (dtype == NPUK_F64) {
    pass_f64(&a, n, x);
    if (!isfinite(a.sum)) bad = first_non_finite(n, x); /* else a sum past DBL_MAX: counted */
  } else if (dtype == NPUK_F32) {
    pass_f32(&a, n, x);
    if (!isfinite(a.sum)) bad = first_non_finite_f32(n, x);
  } else { /* the other dtypes a block at a time through a buffer that stays in cache */
    double block[256];
    size_t size = npuK_dtype_size(dtype);
    for (int64_t i = 0; i < n && bad < 0; i += 256) {
      int64_t m = n - i < 256 ? n - i : 256;
      npuK_cast(NULL, m, dtype, (const char *)x + (size_t)i * size, NPUK_F64, block);
      pass_f64(&a, m, block);
      if (!isfinite(a.sum) && (bad = first_non_finite(m, block)) >= 0) bad += i;
    }
  }
  if (bad >= 0) return bad;
  h->min = a.lo, h->max = a.hi, h->num = (double)n, h->sum = a.sum;
  h->sum_squares = a.sum_squares;
  if (n > 0) h->first = bucket_of(a.lo), h->last = bucket_of(a.hi);
  h->n_entries = histo_walk(h, counts, NULL, NULL);
  return -1;
}

/* Little-endian, whatever the host (one store where the compiler sees the pattern). */
static void store_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The entries the proto lists — histogram.cc's EncodeToProto without preserve_zero_buckets:
   each non-empty bucket, and each run of empty buckets as one entry (the run's last limit,
   count 0) — written (limits and counts not NULL: 8 bytes each, entry j at 8 j) in one walk,
   and counted.  Buckets outside [first, last] are empty, and last is not: one run before at
   most, one after, and each run inside ends before last. */
static int histo_walk(const npuK_histo *h, const uint64_t *counts, uint8_t *limits,
                      uint8_t *counts_out) {
  int n = 0, last = NPUK_HISTOGRAM_N_LIMITS - 1;
#define HISTO_ENTRY(limit, count)                                                              \
  do {                                                                                         \
    if (limits) {                                                                              \
      store_le64(limits + 8 * (size_t)n, double_bits(limit));                                  \
      store_le64(counts_out + 8 * (size_t)n, double_bits((double)(count)));                    \
    }                                                                                          \
    n++;                                                                                       \
  } while (0)
  if (h->first > h->last) { /* nothing counted: histogram.cc keeps one entry */
    HISTO_ENTRY(DBL_MAX, 0);
    return n;
  }
  if (h->first > 0) HISTO_ENTRY(limit_of(h->first - 1), 0);
  for (int i = h->first; i <= h->last; i++) {
    if (!counts[i]) { /* to the run's end, four buckets a step while they are all empty */
      while (i + 4 < h->last && !(counts[i + 1] | counts[i + 2] | counts[i + 3] | counts[i + 4]))
        i += 4;
      while (!counts[i + 1]) i++;
    }
    HISTO_ENTRY(limit_of(i), counts[i]);
  }
  if (h->last < last) HISTO_ENTRY(limit_of(last), 0);
#undef HISTO_ENTRY
  return n;
}

typedef struct histo_arg {
  const char *tag;
  const npuK_histo *h;
  const uint64_t *counts;
} histo_arg;

static void histo_proto(wbuf *b, const void *arg) {
  const histo_arg *a = arg;
  put_double(b, 1, a->h->min);
  put_double(b, 2, a->h->max);
  put_double(b, 3, a->h->num);
  put_double(b, 4, a->h->sum);
  put_double(b, 5, a->h->sum_squares);
  size_t at[2], bytes = (size_t)a->h->n_entries * 8;
  for (uint32_t field = 6; field <= 7; field++) { /* bucket_limit, bucket: packed */
    put_tag(b, field, 2);
    put_varint(b, bytes);
    at[field - 6] = b->n;
    b->n += bytes;
  }
  if (b->p) histo_walk(a->h, a->counts, b->p + at[0], b->p + at[1]);
}

static void histo_body(wbuf *b, const void *arg) {
  const histo_arg *a = arg;
  put_bytes(b, 1, a->tag, strlen(a->tag));
  put_message(b, 5, histo_proto, a);
}

size_t npuK_summary_histogram(uint8_t *out, const char *tag, const npuK_histo *h,
                              const uint64_t *counts) {
  wbuf b = {out, 0};
  histo_arg a = {tag, h, counts};
  put_message(&b, 1, histo_body, &a);
  return b.n;
}

/* ---- PNG ----------------------------------------------------------------------------------- */

enum { STORED_MAX = 65535 };

/* A chunk: length, type, data (written by fill), CRC-32 of type and data. */
static void png_chunk(wbuf *b, const char type[4], size_t len,
                      void (*fill)(wbuf *b, const void *arg), const void *arg) {
  put_be32(b, (uint32_t)len);
  size_t start = b->n;
  put_raw(b, type, 4);
  if (fill) fill(b, arg);
  if (b->p) put_be32(b, npuK_crc32(0, b->p + start, b->n - start));
  else b->n += 4;
}

typedef struct png_arg {
  int64_t h, w;
  int c;
  const uint8_t *pixels;
} png_arg;

static void ihdr(wbuf *b, const void *arg) {
  const png_arg *a = arg;
  static const uint8_t color_type[5] = {0, 0, 4, 2, 6}; /* by channels: gray, -, RGB, RGBA */
  put_be32(b, (uint32_t)a->w);
  put_be32(b, (uint32_t)a->h);
  put_byte(b, 8);                /* bit depth */
  put_byte(b, color_type[a->c]);
  put_byte(b, 0);                /* deflate */
  put_byte(b, 0);                /* adaptive filtering (every row: filter 0) */
  put_byte(b, 0);                /* no interlace */
}

static size_t raw_size(const png_arg *a) { return (size_t)a->h * (1 + (size_t)a->w * (size_t)a->c); }

static size_t zlib_size(size_t raw) {
  size_t blocks = raw ? (raw + STORED_MAX - 1) / STORED_MAX : 1;
  return 2 + blocks * 5 + raw + 4;
}

/* The zlib stream: header (deflate, 32K window, no dictionary, level 0), stored blocks of the
   filtered rows (a filter byte 0, then the row), Adler-32 of the rows, big-endian. */
static void idat(wbuf *b, const void *arg) {
  const png_arg *a = arg;
  size_t raw = raw_size(a), row = (size_t)a->w * (size_t)a->c, left = raw;
  put_byte(b, 0x78);
  put_byte(b, 0x01);
  uint32_t s1 = 1, s2 = 0;
  size_t at = 0; /* position in the filtered stream */
  do {
    size_t len = left < STORED_MAX ? left : STORED_MAX;
    put_byte(b, left == len ? 1 : 0); /* BFINAL on the last block, BTYPE 00 */
    put_le(b, len, 2);
    put_le(b, ~len & 0xffff, 2);
    if (b->p) {
      for (size_t k = 0; k < len; k++, at++) {
        size_t r = at / (row + 1), col = at % (row + 1);
        uint8_t v = col == 0 ? 0 : a->pixels[r * row + col - 1];
        b->p[b->n + k] = v;
        s1 = (s1 + v) % 65521;
        s2 = (s2 + s1) % 65521;
      }
    }
    b->n += len;
    left -= len;
  } while (left);
  put_be32(b, s2 << 16 | s1);
}

size_t npuK_png(uint8_t *out, int64_t h, int64_t w, int c, const uint8_t *pixels) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  wbuf b = {out, 0};
  png_arg a = {h, w, c, pixels};
  put_raw(&b, signature, 8);
  png_chunk(&b, "IHDR", 13, ihdr, &a);
  png_chunk(&b, "IDAT", zlib_size(raw_size(&a)), idat, &a);
  png_chunk(&b, "IEND", 0, NULL, NULL);
  return b.n;
}

void npuK_image_to_u8(int64_t n_pixels, int c, const double *x, const uint8_t *bad_color,
                      uint8_t *y) {
  double lo = 0, hi = 0;
  bool any = false;
  for (int64_t i = 0; i < n_pixels * c; i++) {
    if (!isfinite(x[i])) continue;
    if (!any || x[i] < lo) lo = x[i];
    if (!any || x[i] > hi) hi = x[i];
    any = true;
  }
  double scale, offset;
  if (lo < 0) {
    double m = fmax(fabs(lo), fabs(hi));
    scale = m < 1e-6 ? 0.0 : 127.0 / m;
    offset = 128.0;
  } else {
    scale = hi < 1e-6 ? 0.0 : 255.0 / hi;
    offset = 0.0;
  }
  for (int64_t p = 0; p < n_pixels; p++) {
    const double *px = x + p * c;
    bool finite = true;
    for (int k = 0; k < c; k++) finite = finite && isfinite(px[k]);
    for (int k = 0; k < c; k++) {
      double v = finite ? px[k] * scale + offset : bad_color[k];
      y[p * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

typedef struct image_arg {
  const char *tag;
  char suffix[32]; /* "/image" or "/image/<i>" */
  png_arg png;
} image_arg;

static void image_proto(wbuf *b, const void *arg) {
  const image_arg *a = arg;
  put_int(b, 1, a->png.h);
  put_int(b, 2, a->png.w);
  put_int(b, 3, a->png.c);
  size_t n = npuK_png(NULL, a->png.h, a->png.w, a->png.c, NULL);
  put_tag(b, 4, 2);
  put_varint(b, n);
  if (b->p) npuK_png(b->p + b->n, a->png.h, a->png.w, a->png.c, a->png.pixels);
  b->n += n;
}

static void image_body(wbuf *b, const void *arg) {
  const image_arg *a = arg;
  size_t n = strlen(a->tag), m = strlen(a->suffix);
  put_tag(b, 1, 2);
  put_varint(b, n + m);
  put_raw(b, a->tag, n);
  put_raw(b, a->suffix, m);
  put_message(b, 4, image_proto, a);
}

size_t npuK_summary_images(uint8_t *out, const char *tag, int max_outputs, int64_t n, int64_t h,
                           int64_t w, int c, const uint8_t *pixels) {
  wbuf b = {out, 0};
  size_t per = (size_t)h * (size_t)w * (size_t)c;
  for (int64_t i = 0; i < n; i++) {
    image_arg a = {.tag = tag, .png = {h, w, c, pixels ? pixels + (size_t)i * per : NULL}};
    if (max_outputs == 1) snprintf(a.suffix, sizeof a.suffix, "/image");
    else snprintf(a.suffix, sizeof a.suffix, "/image/%lld", (long long)i);
    put_message(&b, 1, image_body, &a);
  }
  return b.n;
}

/* ---- text ---------------------------------------------------------------------------------- */

typedef struct text_arg {
  const char *tag;
  const uint8_t *text;
  size_t n;
} text_arg;

static void plugin_data(wbuf *b, const void *arg) {
  (void)arg;
  put_bytes(b, 1, "text", 4);
}
static void metadata(wbuf *b, const void *arg) { put_message(b, 1, plugin_data, arg); }
static void tensor_shape(wbuf *b, const void *arg) { (void)b, (void)arg; } /* no dims: a scalar */
static void string_tensor(wbuf *b, const void *arg) {
  const text_arg *a = arg;
  put_int(b, 1, 7); /* DT_STRING */
  put_message(b, 2, tensor_shape, NULL);
  put_bytes(b, 8, a->text, a->n);
}
static void text_body(wbuf *b, const void *arg) {
  const text_arg *a = arg;
  put_bytes(b, 1, a->tag, strlen(a->tag));
  put_message(b, 8, string_tensor, a);
  put_message(b, 9, metadata, NULL);
}

size_t npuK_summary_text(uint8_t *out, const char *tag, const uint8_t *text, size_t n) {
  wbuf b = {out, 0};
  text_arg a = {tag, text, n};
  put_message(&b, 1, text_body, &a);
  return b.n;
}

/* ---- reading tags back (merge's duplicate check) ------------------------------------------ */

static int get_varint(const uint8_t *s, size_t n, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= n) return -1;
    uint8_t byte = s[(*pos)++];
    *v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return 1;
  }
  return -1;
}

/* Skips or reads one field of the message s[*pos .. n): its number, wire type, and for a
   length-delimited one its bytes. */
static int get_field(const uint8_t *s, size_t n, size_t *pos, uint64_t *number,
                     const uint8_t **data, size_t *len) {
  uint64_t key, v;
  if (get_varint(s, n, pos, &key) < 0) return -1;
  *number = key >> 3;
  switch (key & 7) {
  case 0: return get_varint(s, n, pos, &v);
  case 1: if (n - *pos < 8) return -1; *pos += 8; return 1;
  case 5: if (n - *pos < 4) return -1; *pos += 4; return 1;
  case 2:
    if (get_varint(s, n, pos, &v) < 0 || v > n - *pos) return -1;
    *data = s + *pos, *len = (size_t)v;
    *pos += (size_t)v;
    return 2;
  default: return -1;
  }
}

int npuK_summary_next_tag(const uint8_t *s, size_t n, size_t *pos, const uint8_t **tag,
                          size_t *tag_len) {
  while (*pos < n) {
    uint64_t number;
    const uint8_t *value = NULL;
    size_t len = 0;
    int r = get_field(s, n, pos, &number, &value, &len);
    if (r < 0) return -1;
    if (number != 1) continue;
    if (r != 2) return -1;
    *tag = NULL, *tag_len = 0;
    size_t at = 0;
    while (at < len) {
      uint64_t f;
      const uint8_t *d = NULL;
      size_t dl = 0;
      int k = get_field(value, len, &at, &f, &d, &dl);
      if (k < 0) return -1;
      if (f == 1 && k == 2) *tag = d, *tag_len = dl;
    }
    return 1;
  }
  return 0;
}
