# moec_emulated_hip_static: the emulated HIP device
# (libmoec_emulated_hip.so) relinked with MLIR and LLVM from their static
# archives and libstdc++ and libgcc static, so that it loads on a machine
# without LLVM 22 (only glibc stays dynamic). Next to moec-static it runs
# the Python tests on such a machine (docs/python.md, "Elsewhere").
#
# It reuses moec_emulated_hip's object file and the position-independent
# archives that library links (MoeEmulatorCore_pic, moec_reference_pic,
# moec_runtime; device/CMakeLists.txt); one link, nothing is compiled
# again. The output is lib/static/libmoec_emulated_hip.so, the same file
# name as the dynamic one so the package finds it next to a runtime copied
# beside it. Included from device/CMakeLists.txt when MOEC_STATIC is ON;
# built only on request (EXCLUDE_FROM_ALL).

include(${PROJECT_SOURCE_DIR}/cmake/ProjectArchives.cmake)

set(moec_static_device_targets)
moec_collect_project_archives(moec_emulated_hip moec_static_device_targets)

file(GLOB moec_static_device_mlir ${LLVM_LIBRARY_DIR}/libMLIR*.a)
file(GLOB moec_static_device_llvm ${LLVM_LIBRARY_DIR}/libLLVM*.a)
if(NOT moec_static_device_mlir OR NOT moec_static_device_llvm)
  message(FATAL_ERROR "MOEC_STATIC: no libMLIR*.a / libLLVM*.a in "
                      "${LLVM_LIBRARY_DIR} (install the -dev packages)")
endif()
find_library(MOEC_STATIC_ZLIB NAMES libz.a REQUIRED)
find_library(MOEC_STATIC_ZSTD NAMES libzstd.a REQUIRED)

add_library(moec_emulated_hip_static SHARED EXCLUDE_FROM_ALL
            $<TARGET_OBJECTS:moec_emulated_hip>)
set_target_properties(moec_emulated_hip_static PROPERTIES
  LINKER_LANGUAGE CXX
  OUTPUT_NAME moec_emulated_hip
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/static
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/lib/emulated_hip.map)
add_dependencies(moec_emulated_hip_static moec_emulated_hip
                 ${moec_static_device_targets})
set(moec_static_device_archives)
foreach(lib IN LISTS moec_static_device_targets)
  list(APPEND moec_static_device_archives $<TARGET_FILE:${lib}>)
endforeach()
# The version script exports only the HIP entry points (and the emulated
# device's own), so every symbol of MLIR, LLVM and libstdc++ linked in is
# local: nothing clashes with an LLVM or libstdc++ the process already has
# (a torch build, Triton's LLVM). lld resolves references between the
# archives in any order; only the members the device reaches are linked.
target_link_options(moec_emulated_hip_static PRIVATE -fuse-ld=lld
  -static-libstdc++ -static-libgcc -Wl,--gc-sections -Wl,-Bsymbolic
  "LINKER:--version-script=${CMAKE_CURRENT_SOURCE_DIR}/lib/emulated_hip.map"
  "LINKER:--no-undefined")
target_link_libraries(moec_emulated_hip_static PRIVATE
  ${moec_static_device_archives}
  ${moec_static_device_mlir} ${moec_static_device_llvm}
  ${MOEC_STATIC_ZSTD} ${MOEC_STATIC_ZLIB} dl pthread m)
