// The Catch2 main of moec-reference-tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
