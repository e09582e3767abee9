# The source layers (src/CMakeLists.txt) hold: with the include directories a layer's files compile
# with, a header of the same or a lower layer is found and a header of a higher layer is not.
# Run by ctest: cmake -DCC=compiler -DINCS="dir|dir|..." -DOK=header -DBAD=header -P layering.cmake
string(REPLACE "|" ";" dirs "${INCS}")
set(flags "")
foreach(d ${dirs})
  list(APPEND flags "-I${d}")
endforeach()
foreach(kind OK BAD)
  file(WRITE "${WORK}/probe_${kind}.c" "#include \"${${kind}}\"\nint vs_probe;\n")
  execute_process(COMMAND ${CC} -std=c11 -D_GNU_SOURCE -fsyntax-only ${flags} "${WORK}/probe_${kind}.c"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(kind STREQUAL "OK" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${LAYER}: ${OK} (its own or a lower layer) does not compile:\n${err}")
  endif()
  if(kind STREQUAL "BAD" AND rc EQUAL 0)
    message(FATAL_ERROR "${LAYER}: ${BAD} (a higher layer) is visible to it")
  endif()
endforeach()
message(STATUS "${LAYER}: sees ${OK}, not ${BAD}")
