// Catch2's main(), alone in its TU so it is compiled once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
