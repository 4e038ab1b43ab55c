# vkt_embed_shaders(TARGET <name> OUT_HEADERS <var> SOURCES <files...>
#                   [PREBUILT <names...>])
# Compiles each GLSL compute shader to a SPIR-V module (<build>/shaders/<name>.spv) with
# glslangValidator at build time, then writes it as a C header holding
# `const uint32_t spv_<name>[]` (cmake/SpvHeader.cmake). The compile reruns when the
# shader or any file it #includes changes (glslang writes a depfile). Nothing reads a
# .spv file at run time.
#
# PREBUILT names the shaders that need a newer glslang than Debian 12's (the
# cooperative-matrix GEMMs: docs/toolchain.md). Their modules are committed as
# shaders/spv/<name>.spv and embedded from there, unless VKT_SHADER_TOOLCHAIN names the
# folder scripts/shader-toolchain.sh made: then they are compiled from source with its
# glslang, and two more targets exist: spirv_check (each rebuilt module byte for byte
# against the committed one, every module of the build through the toolchain's spirv-val)
# and spirv_update (the rebuilt modules and the digests of their sources into shaders/spv/).
#
# The headers belong to the one custom target <name>: every library that includes them
# depends on it (add_dependencies) and must not list them among its sources. A custom
# command whose outputs are sources of several targets is run by each of them (Makefile
# generators), so a parallel build would compile every shader once per library, all
# writing the same file.
find_program(GLSLANG_VALIDATOR glslangValidator REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/SpvDigest.cmake)
set(VKT_SHADER_TOOLCHAIN "" CACHE PATH
    "Folder made by scripts/shader-toolchain.sh: build the cooperative-matrix shaders from source and check every SPIR-V module (targets spirv_check, spirv_update)")
# The Vulkan versions the modules target: what vktrain requires (1.1), and 1.2 for the
# cooperative-matrix modules (their Vulkan memory model is core there; SPIR-V 1.5, whose
# subgroups keep the device's reported size, which the shaders size their warps by).
set(VKT_SHADER_ENV vulkan1.1)
set(VKT_PREBUILT_SHADER_ENV vulkan1.2)

function(vkt_embed_shaders)
  cmake_parse_arguments(ARG "" "TARGET;OUT_HEADERS" "SOURCES;PREBUILT" ${ARGN})
  set(headers)
  set(modules)        # "<module>|<target env>" of every module, for spirv_check
  set(rebuilt)        # prebuilt shaders compiled here from source
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/shaders)
  foreach(src ${ARG_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    set(spv ${CMAKE_BINARY_DIR}/shaders/${name}.spv)
    set(out ${CMAKE_BINARY_DIR}/shaders/${name}.spv.h)
    list(FIND ARG_PREBUILT ${name} prebuilt)
    set(env ${VKT_SHADER_ENV})
    set(compiler ${GLSLANG_VALIDATOR})
    if(prebuilt GREATER -1)
      set(env ${VKT_PREBUILT_SHADER_ENV})
      set(compiler ${VKT_SHADER_TOOLCHAIN}/bin/glslang)
      if(NOT VKT_SHADER_TOOLCHAIN)
        set(spv ${CMAKE_SOURCE_DIR}/shaders/spv/${name}.spv) # the committed module
      endif()
    endif()
    if(prebuilt EQUAL -1 OR VKT_SHADER_TOOLCHAIN)
      add_custom_command(
        OUTPUT ${spv}
        COMMAND ${compiler} --quiet --target-env ${env} -I${CMAKE_SOURCE_DIR}/shaders
                --depfile ${spv}.d -o ${spv} ${src}
        DEPENDS ${src}
        DEPFILE ${spv}.d
        COMMENT "glslang ${name}.comp"
        VERBATIM)
      if(prebuilt GREATER -1)
        list(APPEND rebuilt ${name})
      endif()
    endif()
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DHEADER=${out} -DNAME=spv_${name}
              -P ${CMAKE_SOURCE_DIR}/cmake/SpvHeader.cmake
      DEPENDS ${spv} ${CMAKE_SOURCE_DIR}/cmake/SpvHeader.cmake
      VERBATIM)
    list(APPEND headers ${out})
    list(APPEND modules "${spv}|${env}")
  endforeach()
  add_custom_target(${ARG_TARGET} DEPENDS ${headers})
  set(${ARG_OUT_HEADERS} ${headers} PARENT_SCOPE)

  if(NOT VKT_SHADER_TOOLCHAIN)
    vkt_prebuilt_digest_warning("${ARG_PREBUILT}")
    return()
  endif()
  foreach(tool glslang spirv-val)
    if(NOT EXISTS ${VKT_SHADER_TOOLCHAIN}/bin/${tool})
      message(FATAL_ERROR "VKT_SHADER_TOOLCHAIN=${VKT_SHADER_TOOLCHAIN} has no bin/${tool}: "
                          "make it with scripts/shader-toolchain.sh (docs/toolchain.md)")
    endif()
  endforeach()
  string(REPLACE ";" "," modules_arg "${modules}")
  string(REPLACE ";" "," rebuilt_arg "${rebuilt}")
  add_custom_target(spirv_check
    COMMAND ${CMAKE_COMMAND} -DMODE=check -DTOOLCHAIN=${VKT_SHADER_TOOLCHAIN}
            -DMODULES=${modules_arg} -DREBUILT=${rebuilt_arg} -DGLSLANG=${GLSLANG_VALIDATOR}
            -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DBINARY_DIR=${CMAKE_BINARY_DIR}
            -P ${CMAKE_SOURCE_DIR}/cmake/SpirvCheck.cmake
    DEPENDS ${ARG_TARGET}
    COMMENT "SPIR-V: the prebuilt modules against a rebuild, every module through spirv-val"
    VERBATIM)
  add_custom_target(spirv_update
    COMMAND ${CMAKE_COMMAND} -DMODE=update -DTOOLCHAIN=${VKT_SHADER_TOOLCHAIN}
            -DREBUILT=${rebuilt_arg} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DGLSLANG=${GLSLANG_VALIDATOR}
            -DBINARY_DIR=${CMAKE_BINARY_DIR} -P ${CMAKE_SOURCE_DIR}/cmake/SpirvCheck.cmake
    DEPENDS ${ARG_TARGET}
    COMMENT "SPIR-V: the rebuilt modules into shaders/spv/"
    VERBATIM)
endfunction()

# A configure-time note (not an error: building needs no toolchain) when the source of a
# prebuilt module, as the compiler sees it (cmake/SpvDigest.cmake), changed since
# shaders/spv/ was written: CI's spirv_check would then fail unless the module came out
# the same.
function(vkt_prebuilt_digest_warning prebuilt)
  set(digests ${CMAKE_SOURCE_DIR}/shaders/spv/sources.sha256)
  if(NOT prebuilt OR NOT EXISTS ${digests})
    return()
  endif()
  file(STRINGS ${digests} lines)
  set(changed)
  foreach(name ${prebuilt})
    vkt_spv_source_digest(${GLSLANG_VALIDATOR} ${CMAKE_SOURCE_DIR}/shaders/${name}.comp
                          ${CMAKE_SOURCE_DIR}/shaders have)
    list(FIND lines "${have}  ${name}.comp" found)
    if(found EQUAL -1)
      list(APPEND changed ${name}.comp)
    endif()
  endforeach()
  if(changed)
    string(REPLACE ";" ", " changed "${changed}")
    message(WARNING "the sources of the prebuilt SPIR-V modules in shaders/spv/ changed "
                    "(${changed}, with what they include): rebuild them with the shader "
                    "toolchain (docs/toolchain.md); CI's spirv_check fails until then if "
                    "the modules differ.")
  endif()
endfunction()
