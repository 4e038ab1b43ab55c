# vkt_spv_source_digest(<glslang> <source.comp> <include dir> <out var>)
# A digest of what a shader's source is to the compiler: the glslang preprocessor's output
# (every #include inlined, #if resolved, as for Vulkan), without its #line directives and
# whitespace, whose form differs between glslang versions and checkouts. A change to a
# header that the shader does not see (another shader's constant in spec.h) leaves it
# alone. Used by cmake/EmbedShaders.cmake (the configure-time note on stale prebuilt
# modules) and cmake/SpirvCheck.cmake (spirv_update writes shaders/spv/sources.sha256).
function(vkt_spv_source_digest glslang src incdir out)
  execute_process(COMMAND ${glslang} -E -DVULKAN=100 -I${incdir} ${src}
                  RESULT_VARIABLE r OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT r EQUAL 0)
    set(${out} "unreadable" PARENT_SCOPE)
    return()
  endif()
  string(REGEX REPLACE "#line[^\n]*\n" "" text "${text}")
  string(REGEX REPLACE "[ \t\r\n]+" "" text "${text}")
  string(SHA256 digest "${text}")
  set(${out} ${digest} PARENT_SCOPE)
endfunction()
