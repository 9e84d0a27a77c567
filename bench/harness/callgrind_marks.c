/* Markers for callgrind (bench/bench_instructions.py, built by bench/harness/callgrind.py).
 *
 * Each gwb_stage_NAME(fn, *args, **kwargs) calls fn(*args, **kwargs) and returns its result.
 * Under callgrind the inclusive cost of the C function gwb_stage_NAME is then the cost of
 * everything fn ran, interpreted or compiled: CPython 3.11's Python frames all show up as
 * _PyEval_EvalFrameDefault, so wrapping a Python-level call in a named C function is what gives
 * it a name in callgrind's output. gwb_measure_NAME(fn) is the same, for the measured loop: the
 * benchmark runs callgrind with --toggle-collect=gwb_measure_* and --dump-after=gwb_measure_*,
 * so only those loops are counted, one dump each. gwb_start_instrumentation() switches on
 * callgrind's instrumentation (the process starts with --instr-atstart=no: imports and set-up
 * run at valgrind's uninstrumented speed). Outside valgrind the client requests are no-ops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <valgrind/callgrind.h>

static PyObject *forward(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "the first argument is the callable to run");
        return NULL;
    }
    return PyObject_Vectorcall(args[0], args + 1, nargs - 1, kwnames);
}

#define MARK(NAME)                                                                          \
    __attribute__((noinline, visibility("default"))) PyObject *NAME(                       \
        PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {       \
        (void)self;                                                                         \
        PyObject *out = forward(args, nargs, kwnames);                                      \
        __asm__ volatile("" ::: "memory"); /* no tail call: the frame stays NAME's */       \
        return out;                                                                         \
    }

MARK(gwb_stage_decode)
MARK(gwb_stage_evaluation)
MARK(gwb_stage_access)
MARK(gwb_stage_placement)
MARK(gwb_stage_patch)
MARK(gwb_stage_answer)
MARK(gwb_stage_log)
MARK(gwb_stage_counters)
MARK(gwb_stage_response)
MARK(gwb_measure_mutate)
MARK(gwb_measure_validate)

static PyObject *start_instrumentation(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    CALLGRIND_START_INSTRUMENTATION;
    Py_RETURN_NONE;
}

static PyObject *on_valgrind(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyBool_FromLong(RUNNING_ON_VALGRIND ? 1 : 0);
}

#define ENTRY(NAME) {#NAME, (PyCFunction)(void (*)(void))NAME, METH_FASTCALL | METH_KEYWORDS, NULL},
static PyMethodDef methods[] = {
    ENTRY(gwb_stage_decode)
    ENTRY(gwb_stage_evaluation)
    ENTRY(gwb_stage_access)
    ENTRY(gwb_stage_placement)
    ENTRY(gwb_stage_patch)
    ENTRY(gwb_stage_answer)
    ENTRY(gwb_stage_log)
    ENTRY(gwb_stage_counters)
    ENTRY(gwb_stage_response)
    ENTRY(gwb_measure_mutate)
    ENTRY(gwb_measure_validate)
    {"start_instrumentation", start_instrumentation, METH_NOARGS, NULL},
    {"on_valgrind", on_valgrind, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gwb_marks", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_gwb_marks(void) { return PyModule_Create(&module); }
