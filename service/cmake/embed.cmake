# Turns IN (config.json) into OUT, a C file defining cfg_embedded_json / cfg_embedded_json_len.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from config.json by service/cmake/embed.cmake: do not edit. */\n"
  "#include <stddef.h>\n"
  "const char cfg_embedded_json[] = {\n  ${bytes}0x00\n};\n"
  "const size_t cfg_embedded_json_len = ${len};\n")
