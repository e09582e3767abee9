# The source layers (src/CMakeLists.txt) hold: with the include directories a layer's files compile
# with, a header of the same or a lower layer is found and a header of a higher layer is not.
# Run by ctest: cmake -DCC=compiler -DLAYER=name -DINCS="dir|dir|..." -DOK=header -DBAD=header -DWORK=dir
#               -P layering.cmake
cmake_minimum_required(VERSION 3.20) # policies: quoted "OK" / "BAD" are strings, not variables
string(REPLACE "|" ";" dirs "${INCS}")
set(flags "")
foreach(d ${dirs})
  list(APPEND flags "-I${d}")
endforeach()
foreach(kind OK BAD)
  set(probe "${WORK}/layering_${LAYER}_${kind}.c") # one file per test: ctest -j runs them side by side
  file(WRITE "${probe}" "#include \"${${kind}}\"\n")
  # preprocess only: what is checked is which headers the include path reaches
  execute_process(COMMAND ${CC} -E -D_GNU_SOURCE ${flags} "${probe}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(kind STREQUAL "OK" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${LAYER}: ${OK} (its own or a lower layer) is not found:\n${err}")
  endif()
  if(kind STREQUAL "BAD")
    if(rc EQUAL 0)
      message(FATAL_ERROR "${LAYER}: ${BAD} (a higher layer) is visible to it")
    endif()
    string(FIND "${err}" "${BAD}" at)
    if(at LESS 0)
      message(FATAL_ERROR "${LAYER}: preprocessing the ${BAD} probe failed for another reason:\n${err}")
    endif()
  endif()
endforeach()
message(STATUS "${LAYER}: sees ${OK}, not ${BAD}")
