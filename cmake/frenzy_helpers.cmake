# frenzy_test(NAME SOURCES...): a GoogleTest binary linked to libfrenzy, registered with CTest.
function(frenzy_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE frenzy GTest::gtest GTest::gtest_main frenzy_options)
  target_compile_definitions(${name} PRIVATE
    FRENZY_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    FRENZY_BIN="$<TARGET_FILE:frenzy_cli>")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
endfunction()
