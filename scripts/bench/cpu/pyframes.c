/* kaas_pyframes: a frame-evaluation hook that makes Python functions visible to
 * callgrind (``scripts/bench cpu --profile``; CPython 3.11, which has no perf trampolines).
 *
 * Each code object gets, on its first evaluation, its own C function kaas_py_<n>
 * (trampolines.h, generated: N_TRAMPOLINES functions that differ only by name), through
 * which every frame of that code is evaluated; the first time, a line
 * "<n>\t<co_filename>\t<co_qualname>\t<co_firstlineno>" goes to the map file. Under
 * callgrind with every other function skipped (--fn-skip), the self cost of kaas_py_<n>
 * is the instructions spent in frames of that code, the C helpers they call included,
 * the Python functions they call excluded; the calls between them form the Python call
 * graph with inclusive costs. Code objects beyond N_TRAMPOLINES share kaas_py_overflow;
 * generated code (file "<string>", "<attrs generated ...>": dataclass and attrs
 * methods) gets none, so that it is charged to the function that called it.
 *
 * The hook changes what it measures a little: CPython does not inline Python-to-Python
 * calls while a frame evaluator is installed, and the hook adds its own work per frame,
 * so the bench takes its totals from a run without it.
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE
#include <Python.h>
#include <stdio.h>
#include <string.h>
#include "internal/pycore_frame.h"

typedef PyObject *(*eval_fn)(PyThreadState *, struct _PyInterpreterFrame *, int);

#define TRAMPOLINE(name)                                                                  \
    __attribute__((noinline, noipa, used)) PyObject *name(                               \
        PyThreadState *ts, struct _PyInterpreterFrame *f, int exc) {                      \
        PyObject *r = _PyEval_EvalFrameDefault(ts, f, exc);                               \
        __asm__ volatile("" ::: "memory");                                                \
        return r;                                                                         \
    }

#include "trampolines.h" /* TRAMPOLINE(kaas_py_0) ... and: static eval_fn trampolines[] */

TRAMPOLINE(kaas_py_overflow)

static Py_ssize_t extra_index = -1;
static Py_ssize_t assigned = 0;
static FILE *map_file = NULL;

static PyObject *evaluate(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc) {
    void *extra = NULL;
    PyObject *code = (PyObject *)f->f_code;
    if (_PyCode_GetExtra(code, extra_index, &extra) < 0) {
        PyErr_Clear();
        extra = NULL;
    }
    if (extra == NULL) {
        PyObject *saved_type, *saved_value, *saved_tb;
        PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
        const char *file = PyUnicode_AsUTF8(f->f_code->co_filename);
        if (file != NULL && file[0] == '<' && strncmp(file, "<frozen ", 8) != 0) {
            /* generated code (a dataclass's or attrs class's __init__): charged to its caller */
            extra = (void *)_PyEval_EvalFrameDefault;
        } else if (assigned < N_TRAMPOLINES) {
            extra = (void *)trampolines[assigned];
            const char *name = PyUnicode_AsUTF8(f->f_code->co_qualname);
            if (map_file != NULL) {
                fprintf(map_file, "%zd\t%s\t%s\t%d\n", assigned, file ? file : "?", name ? name : "?",
                        f->f_code->co_firstlineno);
                fflush(map_file);
            }
            PyErr_Clear();
            assigned++;
        } else {
            extra = (void *)kaas_py_overflow;
        }
        if (_PyCode_SetExtra(code, extra_index, extra) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(saved_type, saved_value, saved_tb);
    }
    return ((eval_fn)extra)(ts, f, exc);
}

/* install(map_path): evaluate every frame through its code's trampoline from now on. */
static PyObject *install(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) {
        return NULL;
    }
    if (map_file == NULL) {
        map_file = fopen(path, "w");
        if (map_file == NULL) {
            return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        }
    }
    if (extra_index < 0) {
        extra_index = _PyEval_RequestCodeExtraIndex(NULL);
        if (extra_index < 0) {
            return PyErr_Format(PyExc_RuntimeError, "no code extra index left");
        }
    }
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), evaluate);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", install, METH_O, "Evaluate every frame through its code object's trampoline."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kaas_pyframes", NULL, -1, methods};

PyMODINIT_FUNC PyInit_kaas_pyframes(void) { return PyModule_Create(&module); }
