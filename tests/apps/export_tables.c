/* export_tables: the driver's private tables (cuGetExportTable) as Remora's libcuda.so.1
 * serves them to a statically linked CUDA runtime (shim/src/driver/export_tables.h):
 *   - every id the CUDA 13.0 static runtime needs is answered, size slots as observed;
 *   - an unknown id, and the runtime's optional log hook, get CUDA_ERROR_NOT_FOUND (the log
 *     names the id: the integration test reads it), NULL arguments CUDA_ERROR_INVALID_VALUE;
 *   - a slot never seen called answers CUDA_ERROR_NOT_SUPPORTED (and is logged);
 *   - context-local storage: put, get, remove, and its destructor run when the context ends;
 *   - the integrity check answers a digest that depends on its arguments, the same one twice.
 * That the static runtime accepts what is served is shown by the static_* twins of the test
 * programs. Ends with "PASS export_tables" (exit 0) or "FAIL export_tables: ..." (exit 1). */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                          \
  do {                                     \
    printf("FAIL export_tables: ");        \
    printf(__VA_ARGS__);                   \
    printf(" (line %d)\n", __LINE__);      \
    exit(1);                               \
  } while (0)
#define CHECK(call)                                                \
  do {                                                             \
    CUresult r_ = (call);                                          \
    if (r_ != CUDA_SUCCESS) FAIL("%s -> %d", #call, (int)r_);      \
  } while (0)
#define EXPECT_ERR(call, code)                                                  \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != (code)) FAIL("%s -> %d, expected %d", #call, (int)r_, (int)(code)); \
  } while (0)

static CUuuid id_of(const char* hex) {
  CUuuid id;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    id.bytes[i] = (char)v;
  }
  return id;
}

static const void* const* table(const char* hex) {
  CUuuid id = id_of(hex);
  const void* t = NULL;
  CUresult r = cuGetExportTable(&t, &id);
  if (r != CUDA_SUCCESS || t == NULL) FAIL("table %s not served (%d)", hex, (int)r);
  return (const void* const*)t;
}

typedef CUresult (*ClsPut)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
typedef CUresult (*ClsRemove)(CUcontext, void*);
typedef CUresult (*ClsGet)(void**, CUcontext, void*);
typedef CUresult (*Integrity)(unsigned, unsigned long long, unsigned long long (*)[2]);
typedef CUresult (*AnySlot)(void);

static int g_dtor_calls;
static CUcontext g_dtor_ctx;
static void* g_dtor_value;
static void dtor(CUcontext ctx, void* key, void* value) {
  (void)key;
  g_dtor_calls++;
  g_dtor_ctx = ctx;
  g_dtor_value = value;
}

int main(void) {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));

  /* Served, with their sizes (slot 0) where the runtime reads one. */
  struct {
    const char* id;
    size_t slots; /* 0: no size slot */
  } served[] = {
      {"d4082055bde6704b8d34ba123c66e1f2", 3},  /* INTEGRITY_CHECK */
      {"42d85a8123f6cb478298f6e78a3aecdc", 4},  /* TOOLS_TLS */
      {"a094798c2e742e7493f20800200c0a66", 7},  /* TOOLS_RUNTIME_CALLBACK_HOOKS */
      {"6bd5fb6c5bf4e74a8987d93912fd9df9", 13}, /* CUDART_INTERFACE */
      {"263e88607cd2614392f6bbd5006dfa7e", 4},  /* CONTEXT_CHECKS */
      {"c693336e1121df11a8c368f355d89593", 0},  /* CONTEXT_LOCAL_STORAGE */
  };
  for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
    const void* const* t = table(served[i].id);
    if (served[i].slots != 0 && (size_t)(uintptr_t)t[0] != served[i].slots * sizeof(void*))
      FAIL("table %s: size slot %zu, expected %zu", served[i].id, (size_t)(uintptr_t)t[0], served[i].slots * sizeof(void*));
  }

  /* Refused: an id nobody knows, and the runtime's optional log hook. */
  const void* t = (const void*)1;
  CUuuid unknown = id_of("0123456789abcdef0123456789abcdef");
  EXPECT_ERR(cuGetExportTable(&t, &unknown), CUDA_ERROR_NOT_FOUND);
  if (t != NULL) FAIL("a refused table is not NULL");
  CUuuid hook = id_of("f8cff95121468b4eb9e2fb469e7c0dd9");
  EXPECT_ERR(cuGetExportTable(&t, &hook), CUDA_ERROR_NOT_FOUND);
  EXPECT_ERR(cuGetExportTable(NULL, &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuGetExportTable(&t, NULL), CUDA_ERROR_INVALID_VALUE);

  /* A slot the runtime was never seen calling (TOOLS_TLS slot 1). */
  EXPECT_ERR(((AnySlot)table("42d85a8123f6cb478298f6e78a3aecdc")[1])(), CUDA_ERROR_NOT_SUPPORTED);

  /* Context-local storage, on the primary context (NULL = the current one) ... */
  const void* const* cls = table("c693336e1121df11a8c368f355d89593");
  ClsPut put = (ClsPut)cls[0];
  ClsRemove rm = (ClsRemove)cls[1];
  ClsGet get = (ClsGet)cls[2];
  CUcontext primary;
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CHECK(cuCtxSetCurrent(primary));
  int key_a, key_b;
  void* v = NULL;
  if (get(&v, primary, &key_a) == CUDA_SUCCESS) FAIL("an unset key has a value");
  CHECK(put(NULL, &key_a, (void*)0x1234, NULL));
  CHECK(get(&v, primary, &key_a));
  if (v != (void*)0x1234) FAIL("got %p, put 0x1234", v);
  CHECK(put(primary, &key_b, (void*)0x5678, NULL));
  CHECK(get(&v, NULL, &key_b));
  if (v != (void*)0x5678) FAIL("got %p, put 0x5678", v);
  CHECK(rm(primary, &key_a));
  if (get(&v, primary, &key_a) == CUDA_SUCCESS) FAIL("a removed key has a value");
  CHECK(get(&v, primary, &key_b));
  EXPECT_ERR(put((CUcontext)&key_a, &key_a, NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
  /* ... and on a created context, whose destruction runs the destructor. */
  CUcontext created;
  CHECK(cuCtxCreate(&created, NULL, 0, dev));
  CHECK(put(created, &key_a, (void*)0xabcd, dtor));
  CHECK(get(&v, created, &key_a));
  if (g_dtor_calls != 0) FAIL("destructor ran early");
  CHECK(cuCtxDestroy(created));
  if (g_dtor_calls != 1 || g_dtor_ctx != created || g_dtor_value != (void*)0xabcd)
    FAIL("destructor: %d calls, ctx %p value %p", g_dtor_calls, (void*)g_dtor_ctx, g_dtor_value);
  CHECK(cuCtxSetCurrent(primary));

  /* The integrity check: deterministic, and its digest depends on the arguments. */
  Integrity check = (Integrity)table("d4082055bde6704b8d34ba123c66e1f2")[1];
  unsigned long long a[2], b[2], c[2];
  CHECK(check(13000, 1700000000ull, &a));
  CHECK(check(13000, 1700000000ull, &b));
  CHECK(check(13000, 1700000001ull, &c));
  if (memcmp(a, b, sizeof(a)) != 0) FAIL("two digests of the same facts differ");
  if (memcmp(a, c, sizeof(a)) == 0) FAIL("the digest ignores the timestamp");
  EXPECT_ERR(check(13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);

  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("PASS export_tables: 6 tables served, unknown ids refused, storage and integrity checked\n");
  return 0;
}
