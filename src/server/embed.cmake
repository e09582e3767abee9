# Writes the file IN as a C byte array (vs_server_page, NUL-terminated, and its length vs_server_page_len)
# to OUT. Run by the build: cmake -DIN=page.html -DOUT=page.c -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN} by embed.cmake: do not edit */\n#include <stddef.h>\n"
     "const char vs_server_page[] = {${bytes}0};\nconst size_t vs_server_page_len = ${n};\n")
