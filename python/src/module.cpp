// python/src/module.cpp — the extension `moepolicy._core`: the library's errors as Python
// exceptions, and the parts of the module (trace.cpp, cache.cpp, online.cpp, offline.cpp).
//
// Errors: `moepolicy::invalid_argument` (a `std::invalid_argument`) becomes `ValueError`
// with the library's message, by pybind11's own translation; `moepolicy::parse_error`
// becomes `moepolicy.ParseError` (a `ValueError`) with the same message and the attributes
// `file`, `line` (None unless the location is a line), `byte_offset` (None unless it is a
// byte offset) and `problem` (the message without the location); a file that cannot be
// written (`std::filesystem::filesystem_error`, `std::ios_base::failure`) becomes `OSError`.
#include <pybind11/pybind11.h>

#include <exception>
#include <filesystem>
#include <ios>
#include <string>

#include "common.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/version.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "moepolicy: policies and algorithms for serving Mixture-of-Experts models beyond GPU memory";
  m.attr("__version__") = std::to_string(MOEPOLICY_VERSION_MAJOR) + "." + std::to_string(MOEPOLICY_VERSION_MINOR) +
                          "." + std::to_string(MOEPOLICY_VERSION_PATCH);

  static py::exception<moepolicy::parse_error> parse_error_type(m, "ParseError", PyExc_ValueError);
  parse_error_type.doc() =
      "A malformed or unreadable trace or table. Attributes: file, line (or None), byte_offset (or None), problem.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const moepolicy::parse_error& e) {
      py::object err = py::reinterpret_borrow<py::object>(parse_error_type)(e.what());
      err.attr("file") = e.file();
      const auto where = e.where();
      err.attr("line") = where.unit == moepolicy::file_location::kind::line ? py::object(py::int_(where.value))
                                                                            : py::object(py::none());
      err.attr("byte_offset") = where.unit == moepolicy::file_location::kind::byte_offset
                                    ? py::object(py::int_(where.value))
                                    : py::object(py::none());
      err.attr("problem") = e.problem();
      PyErr_SetObject(parse_error_type.ptr(), err.ptr());
    } catch (const std::filesystem::filesystem_error& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const std::ios_base::failure& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  moepolicy::python::bind_trace(m);
  moepolicy::python::bind_cache(m);
  moepolicy::python::bind_online(m);
  moepolicy::python::bind_offline(m);
}
