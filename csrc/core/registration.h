// SPDX-License-Identifier: Apache-2.0
// Registration helpers shared by every translation unit that defines ops.
// Mirrors vLLM's csrc/core/registration.h so ops move between the two trees
// without edits.
#pragma once

#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)

#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

// TORCH_LIBRARY that expands NAME first, so the library name can come from the
// build system (TORCH_EXTENSION_NAME=_myops_C) instead of a literal token.
#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)

#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \
  TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// Lets `import vllm_myops._myops_C` load the shared library; loading runs the
// static TORCH_LIBRARY initialisers, which is all the module is for.
#define REGISTER_EXTENSION(NAME)                                               \
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                     \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                 \
                                        STRINGIFY(NAME), nullptr, 0, nullptr}; \
    return PyModule_Create(&module);                                           \
  }
