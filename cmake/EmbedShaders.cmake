# vkt_embed_shaders(TARGET <name> OUT_HEADERS <var> SOURCES <files...>)
# Compiles each GLSL compute shader to SPIR-V with glslangValidator at build time and
# writes it as a C header holding `const uint32_t spv_<name>[]`. The rule reruns when
# the shader or any file it #includes changes (glslang writes a depfile). Nothing reads
# a .spv file at run time.
# The headers belong to the one custom target <name>: every library that includes them
# depends on it (add_dependencies) and must not list them among its sources. A custom
# command whose outputs are sources of several targets is run by each of them (Makefile
# generators), so a parallel build would compile every shader once per library, all
# writing the same file.
find_program(GLSLANG_VALIDATOR glslangValidator REQUIRED)

function(vkt_embed_shaders)
  cmake_parse_arguments(ARG "" "TARGET;OUT_HEADERS" "SOURCES" ${ARGN})
  set(headers)
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/shaders)
  foreach(src ${ARG_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    set(out ${CMAKE_BINARY_DIR}/shaders/${name}.spv.h)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${GLSLANG_VALIDATOR} --quiet --target-env vulkan1.1
              -I${CMAKE_SOURCE_DIR}/shaders --vn spv_${name}
              --depfile ${out}.d -o ${out} ${src}
      DEPENDS ${src}
      DEPFILE ${out}.d
      COMMENT "glslang ${name}.comp"
      VERBATIM)
    list(APPEND headers ${out})
  endforeach()
  add_custom_target(${ARG_TARGET} DEPENDS ${headers})
  set(${ARG_OUT_HEADERS} ${headers} PARENT_SCOPE)
endfunction()
