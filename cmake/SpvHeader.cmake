# cmake -DSPV=<module.spv> -DHEADER=<out.spv.h> -DNAME=<array name> -P SpvHeader.cmake
# Writes a SPIR-V module as a C header: `const uint32_t NAME[]`, its words read
# little-endian (SPIR-V's magic number 0x07230203 first; a module in the other byte order
# is refused).
file(READ ${SPV} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rest "${n} % 8")
if(n LESS 40 OR NOT rest EQUAL 0 OR NOT hex MATCHES "^03022307")
  message(FATAL_ERROR "${SPV}: not a little-endian SPIR-V module")
endif()
string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1u," words "${hex}")
# eight words a line (CMake's regular expressions have no {8})
string(REPEAT "0x[0-9a-f]+u," 8 eight)
string(REGEX REPLACE "(${eight})" "\\1\n    " words "${words}")
get_filename_component(from ${SPV} NAME)
file(WRITE ${HEADER}.tmp "/* generated from ${from} by cmake/SpvHeader.cmake */\n"
     "#include <stdint.h>\n"
     "const uint32_t ${NAME}[] = {\n    ${words}\n};\n")
file(RENAME ${HEADER}.tmp ${HEADER})
