# Build helpers in the spirit of vLLM's cmake/utils.cmake.

# Runs `python -c CODE` and stores stripped stdout in OUT; fails loudly.
function(run_python OUT CODE ERR_MSG)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "${CODE}"
    OUTPUT_VARIABLE _out
    ERROR_VARIABLE _err
    RESULT_VARIABLE _rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${ERR_MSG}: ${_err}")
  endif()
  set(${OUT} "${_out}" PARENT_SCOPE)
endfunction()

# Arch strings ("8.0", "9.0a") to a sortable number: 8.0 -> 800, 9.0a -> 901.
function(_arch_key OUT ARCH)
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)(a|f)?$" _m "${ARCH}")
  if(NOT _m)
    message(FATAL_ERROR "Malformed CUDA arch '${ARCH}' (expected e.g. 8.0 or 9.0a)")
  endif()
  math(EXPR _k "${CMAKE_MATCH_1} * 100 + ${CMAKE_MATCH_2} * 10")
  if(CMAKE_MATCH_3)
    math(EXPR _k "${_k} + 1")
  endif()
  set(${OUT} ${_k} PARENT_SCOPE)
endfunction()

# cuda_archs_loose_intersection(OUT SRC_ARCHS TGT_ARCHS)
#
# For every arch y the build targets (TGT_ARCHS), picks the highest arch x a
# kernel supports (SRC_ARCHS) with x <= y, i.e. the SASS that would run on y:
#   OUT = { max{ x in SRC | x <= y } | y in TGT, that max exists }
# Arch-specific variants ("9.0a") are exact: 9.0a is kept only when the
# target list has 9.0 or 9.0a, and it then replaces plain 9.0 for that target
# (sm_90a code runs only on sm_90, and plain 9.0 never selects it).
# Example: SRC="8.0;8.6;9.0;9.0a", TGT="8.0;8.9;9.0" -> "8.0;8.6;9.0a".
function(cuda_archs_loose_intersection OUT SRC_ARCHS TGT_ARCHS)
  set(_src ${SRC_ARCHS})
  set(_tgt ${TGT_ARCHS})
  set(_result "")
  foreach(_y IN LISTS _tgt)
    _arch_key(_ykey "${_y}")
    # An "a" variant of exactly this major.minor wins for this target.
    string(REGEX REPLACE "a$" "" _y_plain "${_y}")
    if("${_y_plain}a" IN_LIST _src)
      list(APPEND _result "${_y_plain}a")
      continue()
    endif()
    set(_best "")
    set(_best_key -1)
    foreach(_x IN LISTS _src)
      if(_x MATCHES "a$")
        continue()  # arch-specific code never runs on another arch
      endif()
      _arch_key(_xkey "${_x}")
      if(_xkey LESS_EQUAL _ykey AND _xkey GREATER _best_key)
        set(_best "${_x}")
        set(_best_key ${_xkey})
      endif()
    endforeach()
    if(_best)
      list(APPEND _result "${_best}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _result)
  set(${OUT} "${_result}" PARENT_SCOPE)
endfunction()

# Archs nvcc can build for, as "7.5;8.0;...;9.0;...", from `nvcc --list-gpu-arch`.
function(nvcc_supported_archs OUT)
  execute_process(
    COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch
    OUTPUT_VARIABLE _out
    RESULT_VARIABLE _rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "`${CMAKE_CUDA_COMPILER} --list-gpu-arch` failed")
  endif()
  string(REGEX MATCHALL "compute_[0-9]+" _codes "${_out}")
  set(_archs "")
  foreach(_c IN LISTS _codes)
    string(REGEX REPLACE "compute_([0-9]+)([0-9])" "\\1.\\2" _a "${_c}")
    list(APPEND _archs "${_a}")
  endforeach()
  set(${OUT} "${_archs}" PARENT_SCOPE)
endfunction()

# Removes the -gencode flags Torch's CMake config puts in CMAKE_CUDA_FLAGS
# (from TORCH_CUDA_ARCH_LIST or GPU auto-detection): archs are set per source.
macro(clear_torch_cuda_arch_flags)
  string(REGEX REPLACE "-gencode[= ]+arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
endmacro()

# set_gencode_flags_for_srcs(SRCS <files> ARCHS <archs>)
# SASS for every arch plus PTX for the highest, so newer GPUs can JIT it.
function(set_gencode_flags_for_srcs)
  cmake_parse_arguments(_arg "" "" "SRCS;ARCHS" ${ARGN})
  set(_flags "")
  set(_max_plain "")
  set(_max_key -1)
  foreach(_a IN LISTS _arg_ARCHS)
    string(REPLACE "." "" _n "${_a}")
    list(APPEND _flags "-gencode=arch=compute_${_n},code=sm_${_n}")
    if(NOT _a MATCHES "a$")
      _arch_key(_k "${_a}")
      if(_k GREATER _max_key)
        set(_max_key ${_k})
        set(_max_plain "${_n}")
      endif()
    endif()
  endforeach()
  if(_max_plain)
    list(APPEND _flags "-gencode=arch=compute_${_max_plain},code=compute_${_max_plain}")
  endif()
  set_source_files_properties(${_arg_SRCS} PROPERTIES COMPILE_OPTIONS "${_flags}")
endfunction()

# torch_abi_flags(<target>)
# Compiles every translation unit of <target> (C++ and CUDA alike: nvcc
# passes the definition to its host compiler) on the libstdc++ ABI torch was
# built with (TORCH_CXX11_ABI, read from torch at configure time), instead
# of the compiler's default. Inline code of c10 and libstdc++ (c10::str, the
# std::string inside every error message, stream buffers) is instantiated
# in our objects and exchanged with torch's libraries, so it must have
# torch's layout in every object that is linked together.
function(torch_abi_flags TARGET)
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])"
     AND NOT CMAKE_MATCH_1 STREQUAL TORCH_CXX11_ABI)
    message(FATAL_ERROR "TORCH_CXX_FLAGS (${TORCH_CXX_FLAGS}) disagree with "
                        "torch.compiled_with_cxx11_abi() = ${TORCH_CXX11_ABI}")
  endif()
  target_compile_definitions(${TARGET} PRIVATE _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI})
endfunction()

# torch_language_standard(<out-var>)
# The C++ standard torch was built with: the CXX_STANDARD its CMake config
# puts on target torch (17 up to torch 2.12, 20 from 2.13), else 17. Our code
# is compiled on it, as torch.utils.cpp_extension does: libstdc++ declares
# some members per standard (C++20 adds `basic_stringbuf::str() const &`,
# which every c10::str message calls), and torch's wheels, built by
# gcc-toolset on an older libstdc++ base, export their own copies of members
# that base lacks. On another standard than torch's our references bind to
# those copies (libtorch.so is in the process's global lookup scope); on
# torch's we call the members torch itself calls.
function(torch_language_standard OUT)
  get_target_property(_std torch CXX_STANDARD)
  if(NOT _std)
    set(_std 17)
  endif()
  set(${OUT} ${_std} PARENT_SCOPE)
endfunction()

# myops_add_cpu_isa_sources(<target> <sources>...)
# Compiles the sources once per ISA in MYOPS_CPU_ISAS (DEFAULT, AVX2, AVX512
# on x86-64), with that ISA's MYOPS_ISA_FLAGS_<ISA> and
# CPU_CAPABILITY=<ISA>, into object libraries linked into <target>, which
# gets MYOPS_HAVE_CPU_ISA_<ISA> for each. Per-ISA sources name their entry
# points with MYOPS_CPU_ISA_FN (csrc/cpu/isa.h). Each object library uses
# torch's usage requirements (include dirs, definitions, TORCH_CXX_FLAGS) and
# torch's ABI, as the target's own sources do.
function(myops_add_cpu_isa_sources TARGET)
  foreach(_isa IN LISTS MYOPS_CPU_ISAS)
    set(_lib ${TARGET}_cpu_${_isa})
    add_library(${_lib} OBJECT ${ARGN})
    target_include_directories(${_lib} PRIVATE ${CMAKE_SOURCE_DIR}/csrc)
    target_link_libraries(${_lib} PRIVATE torch)
    torch_abi_flags(${_lib})
    target_compile_definitions(${_lib} PRIVATE
      CPU_CAPABILITY=${_isa} CPU_CAPABILITY_${_isa} MYOPS_CPU_ISA_${_isa})
    target_compile_options(${_lib} PRIVATE -O3 ${MYOPS_ISA_FLAGS_${_isa}})
    target_sources(${TARGET} PRIVATE $<TARGET_OBJECTS:${_lib}>)
    target_compile_definitions(${TARGET} PRIVATE MYOPS_HAVE_CPU_ISA_${_isa})
  endforeach()
endfunction()
