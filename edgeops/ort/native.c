/* edgeops' native bridge: ai.edgeops ops as ONNX Runtime custom ops written against its C API,
 * each call handed to a Python function (edgeops/ort/native.py) with its input tensors as they
 * lie in ONNX Runtime's memory and its outputs copied once into ONNX Runtime's buffers.
 *
 * onnxruntime-extensions' Python bridge copies every input into a new numpy array, converts the
 * node's attributes to a Python dict on every call and copies every output back; this library
 * passes pointers instead, and the string attribute is read once, when ONNX Runtime makes the
 * kernel. Python is entered through a ctypes callback (which takes the GIL itself). A kernel
 * may also be given a program (Python publishes one after the node's first call): native
 * entries, one per lowered node or fused chain, that its calls with inputs of the program's
 * types and shapes then run without Python and without the GIL, intermediates and the entries'
 * scratch in an arena taken from the kernel's own pool.
 *
 * The OrtApi struct is an append-only table of function pointers (ONNX Runtime never reorders
 * it), so this file names the slots it uses by index instead of including onnxruntime_c_api.h,
 * which the onnxruntime wheel does not ship. Every slot used is one of API version 1; native.py
 * runs a small session through this library in a child process before it lets a session of
 * its own process use it. The op struct is version 1 (see OrtCustomOp below), or 16 where the
 * runtime has it: its status-returning compute lets a failing kernel fail the run with
 * edgeops' message instead of NaN outputs reported afterwards. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

typedef struct OrtStatus OrtStatus;
typedef void *Slot;          /* one OrtApi entry: a function pointer, cast where called */

enum {
  S_CreateStatus = 0,
  S_GetErrorMessage = 2,
  S_CreateCustomOpDomain = 26,
  S_CustomOpDomain_Add = 27,
  S_AddCustomOpDomain = 28,
  S_GetTensorMutableData = 51,
  S_GetTensorElementType = 60,
  S_GetDimensionsCount = 61,
  S_GetDimensions = 62,
  S_GetTensorTypeAndShape = 65,
  S_KernelInfoGetAttribute_string = 87,
  S_KernelContext_GetInputCount = 88,
  S_KernelContext_GetInput = 90,
  S_KernelContext_GetOutput = 91,
  S_ReleaseStatus = 93,
  S_ReleaseTensorTypeAndShapeInfo = 99,
  S_KernelContext_ParallelFor = 274,   /* API version 16 (ONNX Runtime 1.16) and later */
};

typedef struct OrtApiBase {
  const Slot *(*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} OrtApiBase;

typedef struct OrtCustomOp {
  uint32_t version;
  void *(*CreateKernel)(const struct OrtCustomOp *op, const Slot *api, const void *info);
  const char *(*GetName)(const struct OrtCustomOp *op);
  const char *(*GetExecutionProviderType)(const struct OrtCustomOp *op);
  int (*GetInputType)(const struct OrtCustomOp *op, size_t index);
  size_t (*GetInputTypeCount)(const struct OrtCustomOp *op);
  int (*GetOutputType)(const struct OrtCustomOp *op, size_t index);
  size_t (*GetOutputTypeCount)(const struct OrtCustomOp *op);
  void (*KernelCompute)(void *kernel, void *context);
  void (*KernelDestroy)(void *kernel);
  /* Later versions' fields, up to version 15's: ONNX Runtime asks some of them whatever the
   * version says, so each is defined. Version 16's it reads only for ops of version 16 and up
   * (KernelComputeV2 replaces KernelCompute when set), later ones only from 17 or 18: NULL. */
  int (*GetInputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetOutputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetInputMemoryType)(const struct OrtCustomOp *op, size_t index);
  int (*GetVariadicInputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp *op);
  void *CreateKernelV2;
  OrtStatus *(*KernelComputeV2)(void *kernel, void *context);
  void *later[14];
} OrtCustomOp;
#define STATUS_VERSION 16   /* the op version from which ONNX Runtime calls KernelComputeV2 */
#define RUNTIME_EXCEPTION 6 /* OrtErrorCode ORT_RUNTIME_EXCEPTION */

/* The sha256 of this file (scripts/build_bridge.sh passes it): native.py loads a prebuilt
 * library only when it was built from the source it ships with. */
#ifndef EDGEOPS_SOURCE_HASH
#define EDGEOPS_SOURCE_HASH ""
#endif

#define FLOAT_TYPE 1        /* ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT */
#define MAX_OPS 512
#define NAME_LEN 64
#define DESC_LEN 1024       /* int64 words describing one call's inputs */
#define MAX_DIMS 16

typedef struct {
  OrtCustomOp base;         /* first: ONNX Runtime's pointer to it is one to this */
  char name[NAME_LEN];
  int64_t index;
  size_t n_in, n_out;
} Op;

/* Python's side: make a kernel from (op index, its dispatch string) -> handle (< 0: refused);
 * run one call (handle, context, call description, the kernel for edgeops_native_publish) -> 0,
 * or nonzero when it failed (its message, if any, given with edgeops_native_fail first). */
typedef int64_t (*CreateFn)(int64_t op, const char *spec, int64_t len);
typedef int32_t (*ComputeFn)(int64_t handle, void *context, int64_t *desc, void *kernel);

/* A program: the kernel's call as native entries run one after another, without Python.
 * An entry (a Numba cfunc a target compiled) is
 *   int32_t entry(void *const *args, void *const *arrays, const int64_t *values, void *scratch)
 * args: its inputs' then its outputs' data; arrays, values: what the entry was prepared with
 * (Python keeps them alive as long as the kernel); scratch: its own bytes of the arena; 0 when
 * it ran, else the call goes to Python (which runs the node's kernel and its fallback rules).
 * Buffers: the call's inputs, its outputs, then intermediates (offsets into the arena). Shapes
 * are fixed when the program is made; a call whose inputs differ goes to Python. Immutable once
 * published, except its arena pool: POOL arenas, taken lock-free (a bit each); a call finding
 * them all taken allocates one for itself, and that is counted. */
#define MAX_IO 16
#define MAX_ARGS 24
#define MAX_BUF 256
#define POOL 8
typedef int32_t (*EntryFn)(void *const *args, void *const *arrays, const int64_t *values,
                           void *scratch);
#define MAX_VALUES 64
#define TRIALS 6
/* How a step runs: as prepared (its entry once, on its Numba team), cut into chunks on ONNX
 * Runtime's intra-op pool (KernelContext_ParallelFor), or timed both ways on its first calls
 * and then fixed to the faster (a session is made: Python runs it on zeros meanwhile). */
enum { RUN_PREPARED = 0, RUN_ORT_POOL = 1, RUN_TRIAL = 2 };
typedef struct {
  EntryFn fn;
  void *const *arrays;
  const int64_t *values;
  int32_t n_args;
  int32_t arg[MAX_ARGS];
  int32_t team;             /* the kernels' thread team for this step (0: as the caller's) */
  /* A step that can be cut (split_units > 0): chunks of whole ``grain``s of its units, each an
   * entry call with ``chunk_values`` (word ``count_word`` set to the chunk's units) and its
   * args advanced by ``stride`` bytes a unit; ``chunks`` of them on ONNX Runtime's pool. */
  int64_t split_units, grain;
  int32_t count_word, n_values, chunks;
  int32_t mode;             /* RUN_*: written once the trial decides, read by every call */
  int64_t stride[MAX_ARGS];
  const int64_t *chunk_values;
  int64_t trial_calls;      /* RUN_TRIAL: calls so far, their nanoseconds per way */
  int64_t trial_ns[2][TRIALS];
} Step;

/* The kernels' thread-team count (Numba's threading layer: thread-local), set around a step
 * whose team differs from the calling thread's; NULL until Python hands them over. */
typedef int (*GetThreads)(void);
typedef void (*SetThreads)(int);
static GetThreads get_threads;
static SetThreads set_threads;
typedef struct {
  int32_t n_in, n_out, n_steps, n_buf;
  int32_t in_check[MAX_IO], in_type[MAX_IO], in_rank[MAX_IO], out_rank[MAX_IO];
  int64_t in_dims[MAX_IO][MAX_DIMS], out_dims[MAX_IO][MAX_DIMS];
  int64_t buf_off[MAX_BUF];  /* intermediates' byte offsets in the arena (inputs, outputs: -1) */
  int64_t arena;            /* bytes of one arena */
  int64_t scratch_off;      /* where the entries' own scratch starts in it */
  Step *steps;
  void *slot[POOL];
  uint32_t busy;            /* bit s: slot s is taken */
} Program;

/* Live counts and totals (read by edgeops_native_counters). */
enum { C_PROGRAMS, C_NATIVE_CALLS, C_PYTHON_CALLS, C_POOL_BYTES, C_OVERFLOW, C_ENTRY_FAILED,
       C_MISMATCH, C_COUNT };
static int64_t counters[C_COUNT];
#define COUNT(i, d) __atomic_add_fetch(&counters[i], (d), __ATOMIC_RELAXED)

static Op ops[MAX_OPS];
static int n_ops;
static char domain_name[NAME_LEN] = "ai.edgeops.native";
static const char *attr_name = "edgeops_dispatch";
static CreateFn py_create;
static ComputeFn py_compute;
#define MAX_DEAD 4096
static int64_t dead[MAX_DEAD];
static int n_dead;
static const Slot *api;
static int have_parallel_for;    /* the runtime's API has KernelContext_ParallelFor */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int64_t desc[DESC_LEN];
#define ERR_LEN 2048
static __thread char err[ERR_LEN];   /* the failing call's message (edgeops_native_fail) */
static int status_compute;          /* the ops were registered at STATUS_VERSION */

#define CALL(slot, type) ((type)api[slot])

typedef struct {
  int64_t handle;
  Program *prog;            /* NULL: every call goes to Python */
} Kernel;

static int failed(OrtStatus *st) {
  if (st == NULL) return 0;
  CALL(S_ReleaseStatus, void (*)(OrtStatus *))(st);
  return 1;
}

static const char *op_name(const OrtCustomOp *op) { return ((const Op *)op)->name; }
static const char *op_provider(const OrtCustomOp *op) { (void)op; return "CPUExecutionProvider"; }
static int op_type(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return FLOAT_TYPE; }
static size_t op_inputs(const OrtCustomOp *op) { return ((const Op *)op)->n_in; }
static size_t op_outputs(const OrtCustomOp *op) { return ((const Op *)op)->n_out; }
static int op_zero(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return 0; }
static int op_one(const OrtCustomOp *op) { (void)op; return 1; }

static void *op_create(const OrtCustomOp *op, const Slot *a, const void *info) {
  typedef OrtStatus *(*GetStr)(const void *, const char *, char *, size_t *);
  Kernel *k = malloc(sizeof(Kernel));
  if (k == NULL) return NULL;
  k->handle = -1;
  k->prog = NULL;
  size_t size = 0;
  if (api == NULL) api = a;
  /* With no buffer it only sets the size. */
  failed(CALL(S_KernelInfoGetAttribute_string, GetStr)(info, attr_name, NULL, &size));
  char *spec = calloc(size + 1, 1);
  if (spec == NULL) return k;
  if (size > 0 && failed(CALL(S_KernelInfoGetAttribute_string, GetStr)(info, attr_name, spec,
                                                                       &size)))
    spec[0] = 0;            /* no attribute: Python refuses the empty string */
  if (py_create != NULL)
    k->handle = py_create(((const Op *)op)->index, spec, (int64_t)strlen(spec));
  free(spec);
  return k;
}

/* Input ``i`` of a call: its data, element type, rank and dims (at most ``max_rank``); 0 when
 * read, -1 when ONNX Runtime refused or the rank exceeds ``max_rank``. */
static int read_input(void *context, size_t i, void **data, int *et, int64_t *dims,
                      size_t *rank, size_t max_rank) {
  typedef OrtStatus *(*GetInput)(const void *, size_t, const void **);
  typedef OrtStatus *(*TypeShape)(const void *, void **);
  typedef OrtStatus *(*ElemType)(const void *, int *);
  typedef OrtStatus *(*DimCount)(const void *, size_t *);
  typedef OrtStatus *(*Dims)(const void *, int64_t *, size_t);
  typedef OrtStatus *(*Data)(const void *, void **);
  const void *value = NULL;
  void *info = NULL;
  if (failed(CALL(S_KernelContext_GetInput, GetInput)(context, i, &value)) || value == NULL
      || failed(CALL(S_GetTensorTypeAndShape, TypeShape)(value, &info)))
    return -1;
  int bad = failed(CALL(S_GetTensorElementType, ElemType)(info, et))
            || failed(CALL(S_GetDimensionsCount, DimCount)(info, rank)) || *rank > max_rank
            || failed(CALL(S_GetDimensions, Dims)(info, dims, *rank));
  CALL(S_ReleaseTensorTypeAndShapeInfo, void (*)(void *))(info);
  if (bad || failed(CALL(S_GetTensorMutableData, Data)(value, data))) return -1;
  return 0;
}

static void *arena_alloc(int64_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, (size_t)(bytes > 0 ? bytes : 64)) != 0) return NULL;
  return p;
}

/* An arena of ``p``: a free pool slot (made on its first use), else one of its own (``*own``
 * set: the caller frees it). NULL when out of memory. */
static void *take_arena(Program *p, int *slot, int *own) {
  *own = 0;
  for (int s = 0; s < POOL; s++) {
    uint32_t bit = 1u << s, old = __atomic_load_n(&p->busy, __ATOMIC_RELAXED);
    while (!(old & bit)) {
      if (__atomic_compare_exchange_n(&p->busy, &old, old | bit, 1, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED)) {
        if (p->slot[s] == NULL) {          /* only the taker of bit s touches slot s */
          p->slot[s] = arena_alloc(p->arena);
          if (p->slot[s] == NULL) {
            __atomic_fetch_and(&p->busy, ~bit, __ATOMIC_RELEASE);
            return NULL;
          }
          COUNT(C_POOL_BYTES, p->arena);
        }
        *slot = s;
        return p->slot[s];
      }
    }
  }
  COUNT(C_OVERFLOW, 1);
  *own = 1;
  *slot = -1;
  return arena_alloc(p->arena);
}

static void give_arena(Program *p, void *arena, int slot, int own) {
  if (own) free(arena);
  else if (slot >= 0) __atomic_fetch_and(&p->busy, ~(1u << slot), __ATOMIC_RELEASE);
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* A trial call's time (calls alternate ways; each way's first is not counted: it pays the
 * switch). Once both ways have TRIALS, the step keeps the ONNX Runtime pool only if its median
 * is below TRIAL_MARGIN of the prepared way's: the margin is edgeops.threads.ThreadChoice's,
 * for what the step's own clock does not see (workers' caches, wake-ups landing outside). */
#define TRIAL_MARGIN 0.85
static void trial_record(Step *st, int64_t call, int way, int64_t ns) {
  int64_t k = call / 2 - 1;
  if (k < 0 || k >= TRIALS) return;
  st->trial_ns[way][k] = ns;
  if (call != 2 * (TRIALS + 1) - 1) return;       /* the last trial call decides */
  int64_t a[TRIALS], b[TRIALS];
  memcpy(a, st->trial_ns[RUN_PREPARED], sizeof(a));
  memcpy(b, st->trial_ns[RUN_ORT_POOL], sizeof(b));
  qsort(a, TRIALS, sizeof(int64_t), cmp_i64);
  qsort(b, TRIALS, sizeof(int64_t), cmp_i64);
  int pick = (double)b[TRIALS / 2] < TRIAL_MARGIN * (double)a[TRIALS / 2] ? RUN_ORT_POOL
                                                                          : RUN_PREPARED;
  __atomic_store_n(&st->mode, pick, __ATOMIC_RELEASE);
}

typedef struct {
  const Step *st;
  void *const *args;
  int failed;
} Job;

/* Chunk ``i`` of a cut step, on whichever of ONNX Runtime's threads runs it: the entry with the
 * chunk's values and advanced args, on a one-thread Numba team (a worker of ONNX Runtime's pool
 * must not start a Numba team of its own). */
static void split_chunk(void *user, size_t i) {
  Job *j = user;
  const Step *st = j->st;
  int64_t per = (st->split_units + st->chunks - 1) / st->chunks;
  per = (per + st->grain - 1) / st->grain * st->grain;
  int64_t start = (int64_t)i * per;
  if (start >= st->split_units) return;
  int64_t len = st->split_units - start < per ? st->split_units - start : per;
  void *a[MAX_ARGS];
  int64_t v[MAX_VALUES];
  for (int k = 0; k < st->n_args; k++) a[k] = (char *)j->args[k] + start * st->stride[k];
  memcpy(v, st->chunk_values, (size_t)st->n_values * sizeof(int64_t));
  v[st->count_word] = len;
  int before = get_threads != NULL ? get_threads() : 1;
  if (set_threads != NULL && before != 1) set_threads(1);
  if (st->fn(a, st->arrays, v, NULL) != 0) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  if (set_threads != NULL && before > 1) set_threads(before);
}

/* A cut step's chunks on ONNX Runtime's intra-op pool; here, one after another, if the runtime
 * has no ParallelFor or refused it (a chunk only reads its inputs: running it again is safe). 1
 * when every chunk ran. */
static int run_split(const Step *st, void *const *args, void *context) {
  typedef OrtStatus *(*ParallelFor)(const void *, void (*)(void *, size_t), size_t, size_t,
                                    void *);
  Job j = {st, args, 0};
  if (!have_parallel_for
      || failed(CALL(S_KernelContext_ParallelFor, ParallelFor)(context, split_chunk,
                                                               (size_t)st->chunks,
                                                               (size_t)st->chunks, &j)))
    for (int i = 0; i < st->chunks; i++) split_chunk(&j, (size_t)i);
  return !j.failed;
}

/* Run program ``p`` for this call: 1 when it ran, 0 when the call must go to Python (inputs of
 * other types or shapes, ONNX Runtime refused something, an entry failed). */
static int run_program(Program *p, void *context) {
  typedef OrtStatus *(*GetCount)(const void *, size_t *);
  typedef OrtStatus *(*GetOutput)(void *, size_t, const int64_t *, size_t, void **);
  typedef OrtStatus *(*Data)(const void *, void **);
  void *buf[MAX_BUF];
  void *args[MAX_ARGS];
  size_t n = 0;
  if (failed(CALL(S_KernelContext_GetInputCount, GetCount)(context, &n)) || n < (size_t)p->n_in)
    return 0;
  for (int i = 0; i < p->n_in; i++) {
    buf[i] = NULL;
    if (!p->in_check[i]) continue;         /* a placeholder: the entry holds the constant */
    int et = 0;
    size_t rank = 0;
    int64_t dims[MAX_DIMS];
    if (read_input(context, (size_t)i, &buf[i], &et, dims, &rank, MAX_DIMS) != 0) return 0;
    if (et != p->in_type[i] || (int32_t)rank != p->in_rank[i]
        || memcmp(dims, p->in_dims[i], rank * sizeof(int64_t)) != 0) {
      COUNT(C_MISMATCH, 1);
      return 0;
    }
  }
  for (int j = 0; j < p->n_out; j++) {
    void *value = NULL;
    if (failed(CALL(S_KernelContext_GetOutput, GetOutput)(context, (size_t)j, p->out_dims[j],
                                                          (size_t)p->out_rank[j], &value))
        || value == NULL || failed(CALL(S_GetTensorMutableData, Data)(value, &buf[p->n_in + j])))
      return 0;
  }
  int slot = -1, own = 0;
  char *arena = NULL;
  if (p->arena > 0) {
    arena = take_arena(p, &slot, &own);
    if (arena == NULL) return 0;
  }
  for (int b = p->n_in + p->n_out; b < p->n_buf; b++) buf[b] = arena + p->buf_off[b];
  int ok = 1;
  int before = get_threads != NULL ? get_threads() : 0, now = before;
  for (int s = 0; s < p->n_steps && ok; s++) {
    Step *st = &p->steps[s];
    for (int a = 0; a < st->n_args; a++) args[a] = buf[st->arg[a]];
    int mode = __atomic_load_n(&st->mode, __ATOMIC_ACQUIRE), way = mode;
    int64_t call = 0, t0 = 0;
    if (mode == RUN_TRIAL) {
      call = __atomic_fetch_add(&st->trial_calls, 1, __ATOMIC_RELAXED);
      way = (int)(call & 1);
      t0 = now_ns();
    }
    if (way == RUN_ORT_POOL) {
      if (!run_split(st, args, context)) ok = 0;
    } else {
      int want = st->team > 0 ? st->team : before;
      if (want != now && set_threads != NULL) {
        set_threads(want);
        now = want;
      }
      if (st->fn(args, st->arrays, st->values, arena == NULL ? NULL : arena + p->scratch_off)
          != 0)
        ok = 0;
    }
    if (mode == RUN_TRIAL) trial_record(st, call, way, now_ns() - t0);
  }
  if (now != before && set_threads != NULL) set_threads(before);
  if (arena != NULL) give_arena(p, arena, slot, own);
  if (!ok) {
    COUNT(C_ENTRY_FAILED, 1);
    return 0;
  }
  COUNT(C_NATIVE_CALLS, 1);
  return 1;
}

static void free_program(Program *p) {
  if (p == NULL) return;
  for (int s = 0; s < POOL; s++)
    if (p->slot[s] != NULL) {
      free(p->slot[s]);
      COUNT(C_POOL_BYTES, -p->arena);
    }
  free(p->steps);
  free(p);
  COUNT(C_PROGRAMS, -1);
}

/* desc: [n_in, words after desc[1], then per input: data address, element type, rank, dims...];
 * -1 in desc[0] when the call's inputs could not be read (Python then records the error). */
static int compute(void *kernel, void *context) {
  typedef OrtStatus *(*GetCount)(const void *, size_t *);
  Kernel *k = kernel;
  size_t n = 0;
  int64_t pos = 2;
  desc[0] = -1;
  desc[1] = 0;
  err[0] = 0;
  if (k == NULL || py_compute == NULL) {
    strcpy(err, "edgeops' native bridge: the kernel was not made, or Python has exited");
    return 1;
  }
  Program *prog = __atomic_load_n(&k->prog, __ATOMIC_ACQUIRE);
  if (prog != NULL && run_program(prog, context)) return 0;
  COUNT(C_PYTHON_CALLS, 1);
  if (!failed(CALL(S_KernelContext_GetInputCount, GetCount)(context, &n))) {
    size_t i;
    for (i = 0; i < n; i++) {
      void *data = NULL;
      int et = 0;
      size_t rank = 0;
      int64_t room = DESC_LEN - pos - 3;
      if (room < 0 || read_input(context, i, &data, &et, &desc[pos + 3], &rank,
                                 (size_t)(room < MAX_DIMS ? room : MAX_DIMS)) != 0)
        break;
      desc[pos] = (int64_t)(intptr_t)data;
      desc[pos + 1] = et;
      desc[pos + 2] = (int64_t)rank;
      pos += 3 + (int64_t)rank;
    }
    if (i == n) {
      desc[0] = (int64_t)n;
      desc[1] = pos - 2;
    }
  }
  return py_compute(k->handle, context, desc, k);
}

/* Version 1: a failure is recorded by Python (the session's run raises it afterwards). */
static void op_compute(void *kernel, void *context) { (void)compute(kernel, context); }

/* Version 16: a failure stops the run, with edgeops' message. */
static OrtStatus *op_compute_status(void *kernel, void *context) {
  typedef OrtStatus *(*MakeStatus)(int, const char *);
  if (compute(kernel, context) == 0) return NULL;
  return CALL(S_CreateStatus, MakeStatus)(RUNTIME_EXCEPTION,
                                          err[0] ? err : "edgeops kernel failed (no message)");
}

/* Python is not called here: ONNX Runtime may destroy a session's kernels after the
 * interpreter has finalised. The handle goes on a list Python drains when it next makes one. */
static void op_destroy(void *kernel) {
  Kernel *k = kernel;
  if (k == NULL) return;
  if (k->handle >= 0) {
    pthread_mutex_lock(&lock);
    if (n_dead < MAX_DEAD) dead[n_dead++] = k->handle;
    pthread_mutex_unlock(&lock);
  }
  free_program(k->prog);    /* ONNX Runtime runs no call of a kernel it destroys */
  free(k);
}

/* ---- called from Python (ctypes) ---------------------------------------------------------- */

int edgeops_native_abi(void) { return 4; }

/* The sha256 of the native.c this library was built from ("" when built without it). */
const char *edgeops_native_source(void) { return EDGEOPS_SOURCE_HASH; }

/* The message of the calling thread's failing call (copied; cut at ERR_LEN - 1 bytes). */
void edgeops_native_fail(const char *msg) {
  strncpy(err, msg, ERR_LEN - 1);
  err[ERR_LEN - 1] = 0;
}

/* Whether the ops were last registered with the status-returning compute (a failing kernel
 * then fails the run). */
int edgeops_native_status_compute(void) { return status_compute; }

/* NULLs at interpreter exit: a kernel run after it then does nothing. */
void edgeops_native_callbacks(CreateFn create, ComputeFn compute) {
  py_create = create;
  py_compute = compute;
}

/* Handles of destroyed kernels, at most ``cap`` into ``out``; how many. */
int64_t edgeops_native_take_dead(int64_t *out, int64_t cap) {
  int64_t n = 0;
  pthread_mutex_lock(&lock);
  while (n_dead > 0 && n < cap) out[n++] = dead[--n_dead];
  pthread_mutex_unlock(&lock);
  return n;
}

/* Declare op ``name`` with n_in float inputs and n_out float outputs; its index, or -1. Ops
 * declared after a session registered this library reach only later sessions. */
int64_t edgeops_native_declare(const char *name, int64_t n_in, int64_t n_out) {
  int64_t got = -1;
  if (strlen(name) >= NAME_LEN || n_in < 0 || n_out < 1) return -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_ops; i++)
    if (strcmp(ops[i].name, name) == 0) got = i;
  if (got < 0 && n_ops < MAX_OPS) {
    Op *op = &ops[n_ops];
    memset(op, 0, sizeof(*op));
    strcpy(op->name, name);
    op->index = n_ops;
    op->n_in = (size_t)n_in;
    op->n_out = (size_t)n_out;
    op->base.version = 1;
    op->base.CreateKernel = op_create;
    op->base.GetName = op_name;
    op->base.GetExecutionProviderType = op_provider;
    op->base.GetInputType = op_type;
    op->base.GetInputTypeCount = op_inputs;
    op->base.GetOutputType = op_type;
    op->base.GetOutputTypeCount = op_outputs;
    op->base.KernelCompute = op_compute;
    op->base.KernelDestroy = op_destroy;
    op->base.GetInputCharacteristic = op_zero;      /* INPUT_OUTPUT_REQUIRED */
    op->base.GetOutputCharacteristic = op_zero;
    op->base.GetInputMemoryType = op_zero;          /* OrtMemTypeDefault */
    op->base.GetVariadicInputMinArity = op_one;     /* no variadic inputs or outputs */
    op->base.GetVariadicInputHomogeneity = op_one;
    op->base.GetVariadicOutputMinArity = op_one;
    op->base.GetVariadicOutputHomogeneity = op_one;
    got = n_ops++;
  }
  pthread_mutex_unlock(&lock);
  return got;
}

/* The data address of output ``index`` of the running call, shaped ``dims`` (NULL: refused). */
void *edgeops_native_output(void *context, int64_t index, const int64_t *dims, int64_t rank) {
  typedef OrtStatus *(*GetOutput)(void *, size_t, const int64_t *, size_t, void **);
  typedef OrtStatus *(*Data)(void *, void **);
  void *value = NULL, *data = NULL;
  if (api == NULL || index < 0 || rank < 0) return NULL;
  if (failed(CALL(S_KernelContext_GetOutput, GetOutput)(context, (size_t)index, dims,
                                                        (size_t)rank, &value))
      || value == NULL || failed(CALL(S_GetTensorMutableData, Data)(value, &data)))
    return NULL;
  return data;
}

/* Publish program ``desc`` (``words`` int64 words, laid out as edgeops/ort/native.py's
 * _program writes them) for kernel ``kernel`` (as handed to Python's compute), its steps'
 * entries, arrays and values in ``fns``, ``arrays``, ``values``; one arena is made now. 0, -1
 * when the description is malformed or memory ran out, -2 when the kernel has one already. */
int edgeops_native_publish(void *kernel, const int64_t *desc, int64_t words, void *const *fns,
                           void *const *arrays, void *const *values,
                           void *const *chunk_values) {
  Kernel *k = kernel;
  int64_t pos = 0;
#define TAKE(v) do { if (pos >= words) goto bad; (v) = desc[pos++]; } while (0)
  Program *p = calloc(1, sizeof(Program));
  if (p == NULL) return -1;
  int64_t fmt, n_in, n_out, n_steps, n_mid, v;
  TAKE(fmt); TAKE(n_in); TAKE(n_out); TAKE(n_steps); TAKE(n_mid); TAKE(p->arena);
  TAKE(p->scratch_off);
  if (fmt != 3 || n_in < 0 || n_in > MAX_IO || n_out < 1 || n_out > MAX_IO || n_steps < 1
      || n_mid < 0 || n_in + n_out + n_mid > MAX_BUF || p->arena < 0 || p->scratch_off < 0
      || p->scratch_off > p->arena)
    goto bad;
  p->n_in = (int32_t)n_in; p->n_out = (int32_t)n_out; p->n_steps = (int32_t)n_steps;
  p->n_buf = (int32_t)(n_in + n_out + n_mid);
  for (int i = 0; i < n_in; i++) {
    TAKE(v); p->in_check[i] = (int32_t)v;
    TAKE(v); p->in_type[i] = (int32_t)v;
    TAKE(v); if (v < 0 || v > MAX_DIMS) goto bad; p->in_rank[i] = (int32_t)v;
    for (int d = 0; d < p->in_rank[i]; d++) TAKE(p->in_dims[i][d]);
  }
  for (int j = 0; j < n_out; j++) {
    TAKE(v); if (v < 0 || v > MAX_DIMS) goto bad; p->out_rank[j] = (int32_t)v;
    for (int d = 0; d < p->out_rank[j]; d++) TAKE(p->out_dims[j][d]);
  }
  for (int b = 0; b < p->n_buf; b++) p->buf_off[b] = -1;
  for (int m = 0; m < n_mid; m++) {
    TAKE(v); if (v < 0 || v > p->arena) goto bad; p->buf_off[n_in + n_out + m] = v;
  }
  p->steps = calloc((size_t)n_steps, sizeof(Step));
  if (p->steps == NULL) goto bad;
  for (int s = 0; s < n_steps; s++) {
    Step *st = &p->steps[s];
    TAKE(v); if (v < 1 || v > MAX_ARGS) goto bad; st->n_args = (int32_t)v;
    for (int a = 0; a < st->n_args; a++) {
      TAKE(v); if (v < 0 || v >= p->n_buf) goto bad; st->arg[a] = (int32_t)v;
    }
    TAKE(v); if (v < 0 || v > 4096) goto bad; st->team = (int32_t)v;
    if (st->team > 0 && set_threads == NULL) goto bad;
    TAKE(v); if (v < 0) goto bad; st->split_units = v;
    if (st->split_units > 0) {
      TAKE(v); if (v < 1) goto bad; st->grain = v;
      TAKE(v); if (v < 0 || v >= MAX_VALUES) goto bad; st->count_word = (int32_t)v;
      TAKE(v); if (v <= st->count_word || v > MAX_VALUES) goto bad; st->n_values = (int32_t)v;
      TAKE(v); if (v < 1 || v > 4096) goto bad; st->chunks = (int32_t)v;
      TAKE(v); if (v < RUN_PREPARED || v > RUN_TRIAL) goto bad; st->mode = (int32_t)v;
      for (int a = 0; a < st->n_args; a++) {
        TAKE(v); if (v < 0) goto bad; st->stride[a] = v;
      }
      st->chunk_values = (const int64_t *)chunk_values[s];
      if (st->chunk_values == NULL) goto bad;
    }
    st->fn = (EntryFn)fns[s];
    st->arrays = (void *const *)arrays[s];
    st->values = (const int64_t *)values[s];
    if (st->fn == NULL) goto bad;
  }
  if (pos != words) goto bad;
#undef TAKE
  COUNT(C_PROGRAMS, 1);
  if (p->arena > 0) {            /* the pool's first arena now, while the session is made */
    p->slot[0] = arena_alloc(p->arena);
    if (p->slot[0] == NULL) { free_program(p); return -1; }
    COUNT(C_POOL_BYTES, p->arena);
  }
  Program *none = NULL;
  if (!__atomic_compare_exchange_n(&k->prog, &none, p, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    free_program(p);
    return -2;
  }
  return 0;
bad:
  free(p->steps);
  free(p);
  return -1;
}

/* The threading layer's get/set of the calling thread's team size (see Step.team). */
void edgeops_native_threads(GetThreads get, SetThreads set) {
  get_threads = get;
  set_threads = set;
}

/* Whether the runtime's API has KernelContext_ParallelFor (known once a session registered this
 * library); a step cut for its pool otherwise runs its chunks on the calling thread. */
int edgeops_native_parallel_for(void) { return have_parallel_for; }

/* How step ``step`` of kernel ``kernel``'s program runs now (RUN_*), -1 if there is none. */
int edgeops_native_step_mode(void *kernel, int64_t step) {
  Program *p = __atomic_load_n(&((Kernel *)kernel)->prog, __ATOMIC_ACQUIRE);
  if (p == NULL || step < 0 || step >= p->n_steps) return -1;
  return __atomic_load_n(&p->steps[step].mode, __ATOMIC_ACQUIRE);
}

/* Whether kernel ``kernel`` has a program. */
int edgeops_native_has_program(void *kernel) {
  return __atomic_load_n(&((Kernel *)kernel)->prog, __ATOMIC_ACQUIRE) != NULL;
}

/* Counters into ``out`` (at most ``cap``): live programs, calls run natively, calls through
 * Python, bytes of live pool arenas, arenas allocated past a pool, entries that failed, calls
 * whose inputs did not match their kernel's program. How many written. */
int64_t edgeops_native_counters(int64_t *out, int64_t cap) {
  int64_t n = 0;
  for (; n < cap && n < C_COUNT; n++) out[n] = __atomic_load_n(&counters[n], __ATOMIC_RELAXED);
  return n;
}

/* ONNX Runtime's entry (SessionOptions.register_custom_ops_library): one domain with every op
 * declared so far. */
OrtStatus *RegisterCustomOps(void *options, const OrtApiBase *base) {
  typedef OrtStatus *(*MakeDomain)(const char *, void **);
  typedef OrtStatus *(*AddOp)(void *, const OrtCustomOp *);
  typedef OrtStatus *(*AddDomain)(void *, void *);
  const Slot *a = base->GetApi(1);
  if (a == NULL) return NULL;   /* cannot even report it: the session then lacks the ops */
  api = a;
  /* "1.MINOR.PATCH": the status-returning compute from 1.16 on (op version 16), unless the
   * environment asks for version 1 (tests of the older runtimes' path). */
  const char *v = base->GetVersionString != NULL ? base->GetVersionString() : NULL;
  const char *off = getenv("EDGEOPS_NATIVE_STATUS");
  int major = 0, minor = 0;
  if (v != NULL) {
    major = atoi(v);
    const char *dot = strchr(v, '.');
    if (dot != NULL) minor = atoi(dot + 1);
  }
  int with_status = (major > 1 || (major == 1 && minor >= STATUS_VERSION))
                    && !(off != NULL && strcmp(off, "0") == 0);
  have_parallel_for = major > 1 || (major == 1 && minor >= 16);
  void *domain = NULL;
  OrtStatus *st = CALL(S_CreateCustomOpDomain, MakeDomain)(domain_name, &domain);
  if (st != NULL) return st;
  pthread_mutex_lock(&lock);
  status_compute = with_status;
  for (int i = 0; i < n_ops && st == NULL; i++) {
    /* the op structs are shared by every session: set the same way for one runtime */
    ops[i].base.version = with_status ? STATUS_VERSION : 1;
    ops[i].base.KernelComputeV2 = with_status ? op_compute_status : NULL;
    st = CALL(S_CustomOpDomain_Add, AddOp)(domain, &ops[i].base);
  }
  pthread_mutex_unlock(&lock);
  if (st != NULL) return st;
  return CALL(S_AddCustomOpDomain, AddDomain)(options, domain);
}
