# cmake/Install.cmake - the installable library, included by the top CMakeLists.txt once
# the targets exist.
#
#   <prefix>/include/vkt.h, vkt/*.h              the contract: vkt.h over its six parts
#   <prefix>/<libdir>/libvktrain.so.X.Y[.Z]      shared: exports only the VKT_API functions
#   <prefix>/<libdir>/libvktrain.a               static: the same objects, linked into one
#                                                with every hidden symbol made local
#   <prefix>/<libdir>/cmake/vktrain/             find_package(vktrain CONFIG):
#                                                vktrain::vktrain (shared) and
#                                                vktrain::vktrain_static
#   <prefix>/<libdir>/pkgconfig/vktrain.pc       shared (Cflags: -DVKT_SHARED)
#   <prefix>/<libdir>/pkgconfig/vktrain-static.pc  static (libvktrain.a, no VKT_SHARED)
#   <prefix>/bin/vkt
#   <prefix>/share/vktrain/{mnist,austen}        the shipped data; vkt finds it from its
#                                                own location (../share/vktrain)
#   <prefix>/share/doc/vktrain/                  README, docs, the examples' sources
#   <prefix>/lib/python3/dist-packages/vktrain/  the Python module (docs/python.md): where
#                                                Debian's python3 finds it for the prefix
#                                                /usr (the .deb); elsewhere PYTHONPATH
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# While the major version is 0 every minor release may change the ABI: the soname carries
# major.minor (libvktrain.so.0.1); from 1.0 on, the major only.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(VKT_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(VKT_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()

# The shared library, from the same hidden-visibility objects as the static one. On
# Windows a DLL exports what is marked dllexport, which needs VKT_BUILDING_DLL while
# compiling: its own objects there (without any dllexport, mingw's linker would export
# every symbol).
if(WIN32)
  add_library(vktrain_shared SHARED ${VKT_ENGINE_SOURCES} ${VKT_WORLD_SOURCE})
  add_dependencies(vktrain_shared vktrain_shaders)
  target_compile_definitions(vktrain_shared PRIVATE VKT_BUILDING_DLL)
  target_include_directories(vktrain_shared PRIVATE ${CMAKE_SOURCE_DIR}/include
    ${VKT_PRIVATE_INCLUDES})
else()
  add_library(vktrain_shared SHARED $<TARGET_OBJECTS:vktrain_objects>)
endif()
set_target_properties(vktrain_shared PROPERTIES OUTPUT_NAME vktrain EXPORT_NAME vktrain
  VERSION ${PROJECT_VERSION} SOVERSION ${VKT_SOVERSION})
target_include_directories(vktrain_shared INTERFACE
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# VKT_SHARED: a consumer on Windows declares the functions dllimport (include/vkt.h).
target_compile_definitions(vktrain_shared INTERFACE VKT_SHARED)
target_link_libraries(vktrain_shared PRIVATE ${VKT_LINK_DEPS})
if(VKT_MPI)
  target_link_libraries(vktrain_shared PRIVATE MPI::MPI_C)
endif()
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  # Every symbol resolved at link time: a missing dependency fails here, not in a user's
  # program.
  target_link_options(vktrain_shared PRIVATE -Wl,--no-undefined)
endif()

# The public static archive. The build tree's libvktrain.a (vkt, examples, tests) keeps
# the engine's internal symbols global so the tests can call them; the installed one is
# one relocatable object (ld -r over every object of the library) whose hidden symbols
# objcopy --localize-hidden turns local, so a program linking it statically sees exactly
# the VKT_API functions too and cannot clash with, or call, anything internal.
set(VKT_PUBLIC_DIR ${CMAKE_BINARY_DIR}/public)
file(MAKE_DIRECTORY ${VKT_PUBLIC_DIR})
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_OBJCOPY)
  set(VKT_PUBLIC_OBJECT ${VKT_PUBLIC_DIR}/vktrain_public.o)
  add_custom_command(OUTPUT ${VKT_PUBLIC_OBJECT}
    COMMAND ${CMAKE_LINKER} -r -o ${VKT_PUBLIC_OBJECT} $<TARGET_OBJECTS:vktrain_objects>
    COMMAND ${CMAKE_OBJCOPY} --localize-hidden ${VKT_PUBLIC_OBJECT}
    # the target name too: file dependencies on another target's objects alone give the
    # Makefile generator no order, and a clean parallel build ran this before them
    DEPENDS vktrain_objects $<TARGET_OBJECTS:vktrain_objects>
    COMMENT "One relocatable object for the public libvktrain.a, hidden symbols made local"
    COMMAND_EXPAND_LISTS VERBATIM)
  add_library(vktrain_static STATIC ${VKT_PUBLIC_OBJECT})
  add_dependencies(vktrain_static vktrain_objects)
  set_source_files_properties(${VKT_PUBLIC_OBJECT} PROPERTIES EXTERNAL_OBJECT TRUE
    GENERATED TRUE)
else()
  # No ELF visibility to localize (Windows' PE, or no objcopy): the plain objects.
  add_library(vktrain_static STATIC $<TARGET_OBJECTS:vktrain_objects>)
endif()
set_target_properties(vktrain_static PROPERTIES OUTPUT_NAME vktrain EXPORT_NAME vktrain_static
  LINKER_LANGUAGE C ARCHIVE_OUTPUT_DIRECTORY ${VKT_PUBLIC_DIR})
target_include_directories(vktrain_static INTERFACE
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# A static archive carries its dependencies to the program that links it. MPI as the
# library files FindMPI found (absolute paths), so the package does not need FindMPI.
target_link_libraries(vktrain_static INTERFACE ${VKT_LINK_DEPS})
if(VKT_MPI)
  target_link_libraries(vktrain_static INTERFACE ${MPI_C_LIBRARIES})
endif()

# vkt finds the shipped data relative to its own folder: <bindir>/<this>/mnist.
file(RELATIVE_PATH VKT_DATA_FROM_BIN /p/${CMAKE_INSTALL_BINDIR}
  /p/${CMAKE_INSTALL_DATADIR}/vktrain)
# The source tree's data only for the vkt of this build folder (tools/cli_util.c compares
# its own folder with VKT_BUILD_BIN_DIR), never for an installed copy.
file(REAL_PATH ${CMAKE_CURRENT_BINARY_DIR} VKT_BUILD_BIN_DIR)
target_compile_definitions(vkt PRIVATE VKT_DATA_FROM_BIN="${VKT_DATA_FROM_BIN}"
  VKT_BUILD_BIN_DIR="${VKT_BUILD_BIN_DIR}" VKT_SOURCE_DATA="${CMAKE_SOURCE_DIR}/data")
# plat_exe_dir (engine/platform/platform.h) is the one internal header the tool uses.
target_include_directories(vkt PRIVATE ${CMAKE_SOURCE_DIR}/engine)

install(TARGETS vktrain_shared vktrain_static EXPORT vktrainTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/vkt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/vkt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(TARGETS vkt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/data/mnist ${CMAKE_SOURCE_DIR}/data/austen
  DESTINATION ${CMAKE_INSTALL_DATADIR}/vktrain)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The Python module (python/vktrain, docs/python.md; not on Windows). Its _install.py holds
# the path of the library from the module's folder, relative, so the module loads the
# library of its own prefix wherever the prefix is installed or moved.
if(NOT WIN32)
  set(VKT_PYTHON_DIR lib/python3/dist-packages CACHE STRING
    "Where cmake --install puts the Python module vktrain, relative to the prefix")
  if(IS_ABSOLUTE "${VKT_PYTHON_DIR}")
    message(FATAL_ERROR "VKT_PYTHON_DIR (${VKT_PYTHON_DIR}) must be relative to the prefix")
  endif()
  file(RELATIVE_PATH VKT_PY_TO_LIB /p/${VKT_PYTHON_DIR}/vktrain
    /p/${CMAKE_INSTALL_LIBDIR}/libvktrain.so.${VKT_SOVERSION})
  file(WRITE ${CMAKE_BINARY_DIR}/python/_install.py
    "# Written by cmake/Install.cmake: the library, from this folder.\n"
    "LIBRARY = \"${VKT_PY_TO_LIB}\"\n")
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/vktrain DESTINATION ${VKT_PYTHON_DIR}
    FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  install(FILES ${CMAKE_BINARY_DIR}/python/_install.py DESTINATION ${VKT_PYTHON_DIR}/vktrain)
endif()

# The CMake package: find_package(vktrain CONFIG) -> vktrain::vktrain, vktrain::vktrain_static.
set(VKT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vktrain)
install(EXPORT vktrainTargets NAMESPACE vktrain:: DESTINATION ${VKT_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/vktrainConfig.cmake.in
  ${CMAKE_BINARY_DIR}/vktrainConfig.cmake INSTALL_DESTINATION ${VKT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/vktrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/vktrainConfig.cmake ${CMAKE_BINARY_DIR}/vktrainConfigVersion.cmake
  DESTINATION ${VKT_CMAKE_DIR})

# pkg-config: relocatable (the prefix from the .pc file's own folder).
file(RELATIVE_PATH VKT_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
if(CMAKE_DL_LIBS)
  set(VKT_PC_LIBS_PRIVATE "-lz -lm -lpthread -l${CMAKE_DL_LIBS}")
else()
  set(VKT_PC_LIBS_PRIVATE "-lz -lm -lpthread")
endif()
if(VKT_MPI)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND VKT_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
# Two files (docs/install.md, "pkg-config"): vktrain.pc for the shared library, whose
# Cflags define VKT_SHARED (dllimport on Windows), and vktrain-static.pc for the archive,
# without it (a static program declaring the functions dllimport would not link), naming
# libvktrain.a by path (-lvktrain picks the shared library or the DLL's import library
# when both are installed) and its dependencies in Libs. pkg-config --static cannot do
# this with one file: it adds Libs.private, but the Cflags stay the same.
configure_file(${CMAKE_SOURCE_DIR}/cmake/vktrain.pc.in ${CMAKE_BINARY_DIR}/vktrain.pc @ONLY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/vktrain-static.pc.in ${CMAKE_BINARY_DIR}/vktrain-static.pc
  @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/vktrain.pc ${CMAKE_BINARY_DIR}/vktrain-static.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# cpack -G DEB: one package with everything above, installed under /usr. Its dependencies:
# what dpkg-shlibdeps reads off vkt and libvktrain.so (libc6, zlib1g, libopenmpi3 with
# MPI), plus the Vulkan loader, which vktrain opens at run time (so no linker sees it),
# and a Vulkan driver (mesa-vulkan-drivers gives lavapipe on any CPU).
set(CPACK_PACKAGE_NAME vktrain)
set(CPACK_PACKAGE_VENDOR "vktrain")
set(CPACK_PACKAGE_CONTACT "vktrain maintainers <vktrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Neural-network training on any Vulkan GPU: library, vkt tool and data")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libvulkan1, mesa-vulkan-drivers | vulkan-icd")
# The Python module needs python3 and NumPy; the library and vkt do not.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_GENERATOR DEB)
include(CPack)
