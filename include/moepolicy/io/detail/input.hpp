// moepolicy/io/detail/input.hpp — the file-reading helpers of moepolicy/detail/file_input.hpp,
// made visible in the importers' own `detail` namespace.
#pragma once

#include "moepolicy/detail/file_input.hpp"

namespace moepolicy::io::detail {

using moepolicy::detail::fail_at_byte;
using moepolicy::detail::fail_at_line;
using moepolicy::detail::fail_file;
using moepolicy::detail::open_input;
using moepolicy::detail::read_all;
using moepolicy::detail::read_all_bytes;
using moepolicy::detail::read_rest;

}  // namespace moepolicy::io::detail
