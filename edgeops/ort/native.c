/* edgeops' native bridge: ai.edgeops ops as ONNX Runtime custom ops written against its C API,
 * each call handed to a Python function (edgeops/ort/native.py) with its input tensors as they
 * lie in ONNX Runtime's memory and its outputs copied once into ONNX Runtime's buffers.
 *
 * onnxruntime-extensions' Python bridge copies every input into a new numpy array, converts the
 * node's attributes to a Python dict on every call and copies every output back; this library
 * passes pointers instead, and the string attribute is read once, when ONNX Runtime makes the
 * kernel. Python is entered through a ctypes callback (which takes the GIL itself). A kernel
 * may also be given a plan (Python publishes one for a region that is one fused norm chain):
 * native code that its calls with an input of the plan's size then run without Python.
 *
 * The OrtApi struct is an append-only table of function pointers (ONNX Runtime never reorders
 * it), so this file names the slots it uses by index instead of including onnxruntime_c_api.h,
 * which the onnxruntime wheel does not ship. Every slot used is one of API version 1; native.py
 * runs a small session through this library in a child process before it lets a session of
 * its own process use it. The op struct is version 1 too (see OrtCustomOp below). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef struct OrtStatus OrtStatus;
typedef void *Slot;          /* one OrtApi entry: a function pointer, cast where called */

enum {
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
   * version says, so each is defined. Version 16's and later ones (CreateKernelV2, ...) it reads
   * only for ops of those versions: NULL. */
  int (*GetInputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetOutputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetInputMemoryType)(const struct OrtCustomOp *op, size_t index);
  int (*GetVariadicInputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp *op);
  void *later[16];
} OrtCustomOp;

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
 * run one call (handle, context, call description, the kernel for edgeops_native_set_plan) -> 0
 * or an error. */
typedef int64_t (*CreateFn)(int64_t op, const char *spec, int64_t len);
typedef int32_t (*ComputeFn)(int64_t handle, void *context, int64_t *desc, void *kernel);

/* A plan: one call compiled to native code (a Numba cfunc) for one input size, which ONNX
 * Runtime's thread runs without entering Python: fn(input 0, output 0 shaped as input 0, the
 * plan's arrays and values, which Python keeps alive). Immutable once published; a kernel's
 * plan pointer is swapped whole. */
typedef void (*PlanFn)(const float *x, float *y, void *const *arrays, const int64_t *values);
typedef struct {
  PlanFn fn;
  void *const *arrays;
  const int64_t *values;
  int64_t elems;            /* input 0's element count it was made for */
  int64_t limit;            /* calls it serves before the kernel hands calls to Python again */
} Plan;

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
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int64_t desc[DESC_LEN];

#define CALL(slot, type) ((type)api[slot])

typedef struct {
  int64_t handle;
  Plan *plan;               /* NULL: every call goes to Python */
  int64_t plan_runs;
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
  k->plan = NULL;
  k->plan_runs = 0;
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

/* Run ``plan`` if input 0 has its size and it has calls left (else drop it: Python then times
 * the call's ways again and may publish another): 1 when it ran. */
static int run_plan(Kernel *k, Plan *plan, void *context) {
  typedef OrtStatus *(*GetOutput)(void *, size_t, const int64_t *, size_t, void **);
  typedef OrtStatus *(*Data)(const void *, void **);
  void *x = NULL, *out = NULL, *y = NULL;
  int et = 0;
  size_t rank = 0;
  int64_t dims[MAX_DIMS], elems = 1;
  if (read_input(context, 0, &x, &et, dims, &rank, MAX_DIMS) != 0) return 0;
  for (size_t i = 0; i < rank; i++) elems *= dims[i];
  if (elems != plan->elems) return 0;
  if (__atomic_add_fetch(&k->plan_runs, 1, __ATOMIC_RELAXED) > plan->limit) {
    __atomic_store_n(&k->plan, NULL, __ATOMIC_RELEASE);   /* the old one stays allocated: */
    return 0;                                            /* another thread may be running it */
  }
  if (failed(CALL(S_KernelContext_GetOutput, GetOutput)(context, 0, dims, rank, &out))
      || out == NULL || failed(CALL(S_GetTensorMutableData, Data)(out, &y)))
    return 0;
  plan->fn((const float *)x, (float *)y, plan->arrays, plan->values);
  return 1;
}

/* desc: [n_in, words after desc[1], then per input: data address, element type, rank, dims...];
 * -1 in desc[0] when the call's inputs could not be read (Python then records the error). */
static void op_compute(void *kernel, void *context) {
  typedef OrtStatus *(*GetCount)(const void *, size_t *);
  Kernel *k = kernel;
  size_t n = 0;
  int64_t pos = 2;
  desc[0] = -1;
  desc[1] = 0;
  if (k == NULL || py_compute == NULL) return;
  Plan *plan = __atomic_load_n(&k->plan, __ATOMIC_ACQUIRE);
  if (plan != NULL && run_plan(k, plan, context)) return;
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
  py_compute(k->handle, context, desc, k);
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
  free(k->plan);            /* plans it dropped earlier stay allocated (see run_plan) */
  free(k);
}

/* ---- called from Python (ctypes) ---------------------------------------------------------- */

int edgeops_native_abi(void) { return 1; }

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

/* Publish a plan for kernel ``kernel`` (as handed to Python's compute): inputs of ``elems``
 * elements, for the next ``limit`` calls; 0, or -1 when out of memory. */
int edgeops_native_set_plan(void *kernel, PlanFn fn, void *const *arrays, const int64_t *values,
                            int64_t elems, int64_t limit) {
  Kernel *k = kernel;
  Plan *p = malloc(sizeof(Plan));
  if (p == NULL) return -1;
  p->fn = fn;
  p->arrays = arrays;
  p->values = values;
  p->elems = elems;
  p->limit = limit;
  __atomic_store_n(&k->plan_runs, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&k->plan, p, __ATOMIC_RELEASE);
  return 0;
}

/* Whether kernel ``kernel`` has a plan (a call through Python with one: an input of another
 * size). */
int edgeops_native_plan_active(void *kernel) {
  return __atomic_load_n(&((Kernel *)kernel)->plan, __ATOMIC_ACQUIRE) != NULL;
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
  void *domain = NULL;
  OrtStatus *st = CALL(S_CreateCustomOpDomain, MakeDomain)(domain_name, &domain);
  if (st != NULL) return st;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_ops && st == NULL; i++)
    st = CALL(S_CustomOpDomain_Add, AddOp)(domain, &ops[i].base);
  pthread_mutex_unlock(&lock);
  if (st != NULL) return st;
  return CALL(S_AddCustomOpDomain, AddDomain)(options, domain);
}
