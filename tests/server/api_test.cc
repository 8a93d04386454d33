// The HTTP API is tested in daemon_test.cc (Api.*) through Handle, without a socket.
#include <gtest/gtest.h>
