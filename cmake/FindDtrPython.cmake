# Looks for what the Python module needs: the Python interpreter and its development
# headers, and nanobind (PyPI; `python3 -m nanobind --cmake_dir` says where its CMake
# package is). Sets _dtr_python_default to ON when both are found and no sanitizer is on.
# The interpreter is the `python3` first on PATH (a pyenv or venv one included) unless
# Python_EXECUTABLE is given; scripts/setup.sh installs nanobind for that interpreter.
set(_dtr_python_default OFF)
if(NOT DTR_SANITIZE STREQUAL "")
  return()
endif()
if(NOT Python_EXECUTABLE)
  find_program(_dtr_python3 NAMES python3 NO_CACHE)
  if(_dtr_python3)
    # A pyenv shim or venv link: ask the interpreter where it really lives.
    execute_process(COMMAND "${_dtr_python3}" -c "import sys; print(sys.executable)"
                    OUTPUT_VARIABLE _dtr_python_real OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _dtr_python_rc ERROR_QUIET)
    if(_dtr_python_rc EQUAL 0 AND EXISTS "${_dtr_python_real}")
      set(Python_EXECUTABLE "${_dtr_python_real}" CACHE FILEPATH "Python interpreter")
    endif()
  endif()
endif()
find_package(Python 3.9 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python_FOUND)
  message(STATUS "dtr: no Python interpreter with development headers; the Python module is off")
  return()
endif()
execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                OUTPUT_VARIABLE _dtr_nanobind_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _dtr_nanobind_rc ERROR_QUIET)
if(NOT _dtr_nanobind_rc EQUAL 0)
  message(STATUS "dtr: nanobind not installed for ${Python_EXECUTABLE} "
                 "(python3 -m pip install nanobind); the Python module is off")
  return()
endif()
list(APPEND CMAKE_PREFIX_PATH "${_dtr_nanobind_dir}")
find_package(nanobind CONFIG QUIET)
if(nanobind_FOUND)
  set(_dtr_python_default ON)
  message(STATUS "dtr: Python module with ${Python_EXECUTABLE} (${Python_VERSION}), nanobind ${nanobind_VERSION}")
endif()
