# The shader toolchain's checks (cmake/EmbedShaders.cmake's targets spirv_check and
# spirv_update; docs/toolchain.md), run as
#   cmake -DMODE=check|update -DTOOLCHAIN=<dir> -DREBUILT=<names,...> [-DMODULES=<spv|env,...>]
#         -DGLSLANG=<glslangValidator> -DSOURCE_DIR=<repo> -DBINARY_DIR=<build>
#         -P SpirvCheck.cmake
# check:  each module rebuilt from source (REBUILT) equals shaders/spv/<name>.spv byte for
#         byte, and every module of the build (MODULES) passes the toolchain's spirv-val
#         for its target environment; fails naming each module that does not. Digests of
#         the rebuilt modules' sources that no longer match (shaders/spv/sources.sha256)
#         is reported, not failed: the modules themselves are what ships.
# update: the rebuilt modules into shaders/spv/, and the digests of their sources
#         (cmake/SpvDigest.cmake) into shaders/spv/sources.sha256.
string(REPLACE "," ";" rebuilt "${REBUILT}")
string(REPLACE "," ";" modules "${MODULES}")
set(spv_dir ${SOURCE_DIR}/shaders/spv)

include(${CMAKE_CURRENT_LIST_DIR}/SpvDigest.cmake)

# "<digest>  <name>.comp" per rebuilt module (cmake/SpvDigest.cmake).
function(digest_text out)
  set(text "")
  foreach(name ${rebuilt})
    vkt_spv_source_digest(${GLSLANG} ${SOURCE_DIR}/shaders/${name}.comp ${SOURCE_DIR}/shaders d)
    string(APPEND text "${d}  ${name}.comp\n")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "update")
  foreach(name ${rebuilt})
    file(COPY_FILE ${BINARY_DIR}/shaders/${name}.spv ${spv_dir}/${name}.spv)
    message(STATUS "shaders/spv/${name}.spv updated")
  endforeach()
  digest_text(text)
  file(WRITE ${spv_dir}/sources.sha256 "${text}")
  message(STATUS "shaders/spv/sources.sha256 updated")
  return()
endif()

set(failed)
foreach(name ${rebuilt})
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files
                  ${BINARY_DIR}/shaders/${name}.spv ${spv_dir}/${name}.spv RESULT_VARIABLE r)
  if(r EQUAL 0)
    message(STATUS "${name}.spv: the rebuild equals shaders/spv/${name}.spv")
  else()
    list(APPEND failed "${name}.spv differs from its rebuild (rebuild with this toolchain and "
                       "commit: cmake --build <build> --target spirv_update)")
  endif()
endforeach()
set(count 0)
foreach(entry ${modules})
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 module)
  list(GET entry 1 env)
  execute_process(COMMAND ${TOOLCHAIN}/bin/spirv-val --target-env ${env} ${module}
                  RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE o)
  if(NOT r EQUAL 0)
    get_filename_component(n ${module} NAME)
    list(APPEND failed "${n}: spirv-val --target-env ${env}: ${o}")
  endif()
  math(EXPR count "${count} + 1")
endforeach()
message(STATUS "spirv-val: ${count} modules checked")
if(EXISTS ${spv_dir}/sources.sha256)
  digest_text(text)
  file(READ ${spv_dir}/sources.sha256 old)
  if(NOT old STREQUAL text)
    message(WARNING "shaders/spv/sources.sha256 does not match the sources any more; the "
                    "modules are checked above. Refresh it: cmake --build <build> --target "
                    "spirv_update")
  endif()
endif()
if(failed)
  string(REPLACE ";" "\n  " failed "${failed}")
  message(FATAL_ERROR "SPIR-V check failed:\n  ${failed}")
endif()
