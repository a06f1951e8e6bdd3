# libFuzzer harnesses (test/fuzz/README.md). Included by the top-level CMakeLists.txt only with
# -DSF_FUZZ=ON, after every other target is defined; a build without SF_FUZZ never reads this.
#
# With SF_FUZZ every C target of the project is compiled with
# -fsanitize=fuzzer-no-link,address,undefined (coverage feedback for libFuzzer from our code and
# llhttp, sanitizers everywhere) and the programs among them link the sanitizer runtimes, so the
# whole tree still builds; the harnesses themselves link libFuzzer (-fsanitize=fuzzer). Asserts
# stay on (-UNDEBUG). Use a build directory of its own: test/fuzz/run.sh uses build-fuzz/.

if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "SF_FUZZ needs clang with libFuzzer: -DCMAKE_C_COMPILER=clang "
                      "(this is ${CMAKE_C_COMPILER_ID})")
endif()
if(SANITIZE)
  message(FATAL_ERROR "SF_FUZZ brings its own sanitizers: leave SANITIZE empty")
endif()
if(NOT SF_MALLOC STREQUAL "glibc")
  message(FATAL_ERROR "SF_FUZZ cannot be combined with SF_MALLOC=${SF_MALLOC}")
endif()

set(SF_FUZZ_SANITIZERS address,undefined)
# Every finding aborts, except that pointer-overflow and nonnull-attribute reports go through the
# suppressions of test/fuzz/ubsan.supp first (known, reported bugs); the harnesses set
# halt_on_error=1, so an unsuppressed one still aborts.
set(SF_FUZZ_FLAGS -fno-omit-frame-pointer -fno-sanitize-recover=all
                  -fsanitize-recover=pointer-overflow,nonnull-attribute -g -UNDEBUG)

# Everything defined so far. The LD_PRELOAD malloc shim (a SHARED library) stays as it is.
get_property(_sf_fuzz_existing DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
foreach(_t IN LISTS _sf_fuzz_existing)
  get_target_property(_type ${_t} TYPE)
  if(_type STREQUAL "STATIC_LIBRARY" OR _type STREQUAL "EXECUTABLE")
    target_compile_options(${_t} PRIVATE -fsanitize=fuzzer-no-link,${SF_FUZZ_SANITIZERS}
                                         ${SF_FUZZ_FLAGS})
  endif()
  if(_type STREQUAL "EXECUTABLE")
    target_link_options(${_t} PRIVATE -fsanitize=${SF_FUZZ_SANITIZERS})
  endif()
endforeach()

# sf_conn_fake (the connections without sockets the protocol harnesses feed) is one of the
# libraries above: defined in CMakeLists.txt, instrumented by the loop like the rest.
set(_sf_fuzz_libs_http sf_conn_fake sf_app)
set(_sf_fuzz_libs_memcache sf_conn_fake sf_app)
set(_sf_fuzz_libs_config sf_config)
set(_sf_fuzz_libs_ids sf_snowflake)
set(_sf_fuzz_libs_snapshot sf_cache)
set(_sf_fuzz_libs_tls sf_conn_fake sf_app) # the echo protocol over net/transport_tls.c
set(SF_FUZZ_HARNESSES http memcache config ids snapshot tls)
foreach(_name IN LISTS SF_FUZZ_HARNESSES)
  add_executable(fuzz_${_name} test/fuzz/fuzz_${_name}.c)
  target_compile_options(fuzz_${_name} PRIVATE -fsanitize=fuzzer,${SF_FUZZ_SANITIZERS}
                                               ${SF_FUZZ_FLAGS})
  target_link_options(fuzz_${_name} PRIVATE -fsanitize=fuzzer,${SF_FUZZ_SANITIZERS})
  target_link_libraries(fuzz_${_name} PRIVATE ${_sf_fuzz_libs_${_name}})
  target_compile_definitions(fuzz_${_name} PRIVATE
                             SF_FUZZ_UBSAN_SUPP="${CMAKE_SOURCE_DIR}/test/fuzz/ubsan.supp")
  sf_strict(fuzz_${_name})
endforeach()

# Writes the snapshot seeds with the real code (test/fuzz/run.sh --seeds).
add_executable(fuzz_make_seeds test/fuzz/make_seeds.c)
target_compile_options(fuzz_make_seeds PRIVATE -fsanitize=${SF_FUZZ_SANITIZERS} ${SF_FUZZ_FLAGS})
target_link_options(fuzz_make_seeds PRIVATE -fsanitize=${SF_FUZZ_SANITIZERS})
target_link_libraries(fuzz_make_seeds PRIVATE sf_cache)
sf_strict(fuzz_make_seeds)

list(TRANSFORM SF_FUZZ_HARNESSES PREPEND fuzz_ OUTPUT_VARIABLE _sf_fuzz_targets)
add_custom_target(fuzz DEPENDS ${_sf_fuzz_targets} fuzz_make_seeds)
