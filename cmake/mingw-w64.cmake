# Cross-compiling for 64-bit Windows with Debian's mingw-w64
# (apt-get install gcc-mingw-w64-x86-64 libz-mingw-w64-dev):
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release
# scripts/windows.sh builds with it and runs the tests under Wine.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(VKT_MINGW_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${VKT_MINGW_TRIPLE}-gcc)
set(CMAKE_RC_COMPILER ${VKT_MINGW_TRIPLE}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${VKT_MINGW_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER) # glslangValidator: the build machine's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)  # zlib: mingw's
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The Vulkan and volk headers are target-neutral, but they live in the build machine's
# /usr/include, which must not be on a cross compiler's include path (glibc's headers
# would shadow mingw's): a folder holding only links to them stands in. vktrain opens
# vulkan-1.dll at run time, so no import library is needed; Vulkan_LIBRARY only
# satisfies FindVulkan.
set(VKT_CROSS_INCLUDE ${CMAKE_BINARY_DIR}/cross-include)
foreach(entry vulkan vk_video volk.h volk.c)
  if(EXISTS /usr/include/${entry} AND NOT EXISTS ${VKT_CROSS_INCLUDE}/${entry})
    file(MAKE_DIRECTORY ${VKT_CROSS_INCLUDE})
    file(CREATE_LINK /usr/include/${entry} ${VKT_CROSS_INCLUDE}/${entry} SYMBOLIC)
  endif()
endforeach()
set(Vulkan_INCLUDE_DIR ${VKT_CROSS_INCLUDE} CACHE PATH "Vulkan headers (links)")
set(Vulkan_LIBRARY vulkan-1 CACHE STRING "opened at run time: vulkan-1.dll")
set(VOLK_INCLUDE_DIR ${VKT_CROSS_INCLUDE} CACHE PATH "volk (links)")
# No Open MPI for Windows here.
set(VKT_MPI OFF CACHE BOOL "Training across processes through MPI")
set(VKT_TSAN_TESTS OFF CACHE BOOL "no ThreadSanitizer for mingw")
# Programs run on this machine through Wine (ctest, try_run).
set(CMAKE_CROSSCOMPILING_EMULATOR wine)
# mingw's own printf family (C99: %zu, %lld), not msvcrt's, for the whole build.
add_compile_definitions(__USE_MINGW_ANSI_STDIO=1)
# The engine's __attribute__((format(printf, ...))) means Microsoft's printf to mingw's
# GCC, which knows no %zu, though the functions print through mingw's C99 printf above:
# the format checks stay with the Linux build.
add_compile_options(-Wno-format)
# Link mingw's runtime (libgcc, libwinpthread: clock_gettime, -pthread) statically, so the
# programs and the DLL need nothing beside them but Windows' own DLLs (and vulkan-1.dll);
# zlib too (libz.a, not the import library of zlib1.dll, which Windows does not have).
set(ZLIB_USE_STATIC_LIBS ON CACHE BOOL "link zlib statically (FindZLIB, CMake >= 3.24)")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static")
