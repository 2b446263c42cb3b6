// python/src/common.hpp — what every part of the module shares: turning Python array-likes
// (numpy arrays, lists, anything with `__array__`, such as a CPU torch tensor) into checked
// spans, building numpy results, and releasing the GIL for long calls.
//
// Inputs are checked here with the library's message shape (`moepolicy::<function>:
// <problem>, got <value>`, a `ValueError` in Python): the library's hot-path functions only
// assert their preconditions, so nothing unchecked reaches them. Integer inputs must be of an
// integer (or bool) dtype — a float array is refused, never truncated — and every value is
// range-checked; floating inputs may be of any real dtype.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"

namespace moepolicy::python {

namespace py = pybind11;

void bind_trace(py::module_& m);
void bind_cache(py::module_& m);
void bind_online(py::module_& m);
void bind_offline(py::module_& m);

/// Calls on more elements than this release the GIL (below it, releasing and re-taking it
/// costs more than the call).
inline constexpr std::size_t release_gil_above = 512;

/// Releases the GIL for the lifetime of the object when `work` is above the threshold.
class maybe_release {
 public:
  explicit maybe_release(std::size_t work) {
    if (work > release_gil_above) release_.emplace();
  }

 private:
  std::optional<py::gil_scoped_release> release_;
};

/// `obj` as a C-contiguous numpy array (no copy when it already is one); a `ValueError`
/// naming `fn` and `what` when numpy cannot make an array of it.
inline py::array as_contiguous(py::handle obj, std::string_view fn, std::string_view what) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    if ((a.flags() & py::array::c_style) != 0) return a;
  }
  py::array a = py::array::ensure(obj, py::array::c_style);
  if (!a) {
    detail::throw_invalid(fn, std::string(what) + " must be an array-like",
                          std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  return a;
}

/// Calls `f(span)` with the integer elements of `a`, typed as stored.
template <class F>
void visit_integers(const py::array& a, std::string_view fn, std::string_view what, F&& f) {
  const char kind = a.dtype().kind();
  const auto n = static_cast<std::size_t>(a.size());
  const void* p = a.data();
  const auto is = [&](auto tag) {
    using T = decltype(tag);
    f(std::span<const T>(static_cast<const T*>(p), n));
  };
  if (kind == 'b') return is(std::uint8_t{});
  if (kind == 'i' || kind == 'u') {
    const bool s = kind == 'i';
    switch (a.itemsize()) {
      case 1:
        return s ? is(std::int8_t{}) : is(std::uint8_t{});
      case 2:
        return s ? is(std::int16_t{}) : is(std::uint16_t{});
      case 4:
        return s ? is(std::int32_t{}) : is(std::uint32_t{});
      case 8:
        return s ? is(std::int64_t{}) : is(std::uint64_t{});
      default:
        break;
    }
  }
  detail::throw_invalid(fn, std::string(what) + " must hold integers (a float array is not truncated), dtype",
                        std::string(py::str(a.dtype())));
}

/// Copies the integers of `obj` into `out` as `T`, each checked to lie in [lo, hi].
template <class T>
py::array read_integers(py::handle obj, std::string_view fn, std::string_view what, std::int64_t lo, std::uint64_t hi,
                        std::vector<T>& out) {
  py::array a = as_contiguous(obj, fn, what);
  // Integers stored in the other byte order are converted, never read as they lie.
  if (a.itemsize() > 1 && !a.dtype().attr("isnative").cast<bool>()) {
    a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
  }
  visit_integers(a, fn, what, [&](auto s) {
    out.resize(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      const auto v = s[i];
      using V = std::decay_t<decltype(v)>;
      bool ok;
      if constexpr (std::is_signed_v<V>) {
        ok = static_cast<std::int64_t>(v) >= lo && (v < 0 || static_cast<std::uint64_t>(v) <= hi);
      } else {
        ok = (lo <= 0 || static_cast<std::uint64_t>(v) >= static_cast<std::uint64_t>(lo)) &&
             static_cast<std::uint64_t>(v) <= hi;
      }
      if (!ok) {
        detail::throw_invalid(fn,
                              std::string(what) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "], element " + std::to_string(i),
                              static_cast<long long>(v));
      }
      out[i] = static_cast<T>(v);
    }
  });
  return a;
}

/// `obj` as a C-contiguous array of `T` (float or double): no copy when it already is one,
/// else converted from any real dtype; integers and bools are accepted, complex, strings and
/// objects are not.
template <class T>
py::array_t<T, py::array::c_style> read_reals(py::handle obj, std::string_view fn, std::string_view what) {
  if (py::isinstance<py::array_t<T, py::array::c_style>>(obj)) {
    auto a = py::reinterpret_borrow<py::array_t<T, py::array::c_style>>(obj);
    if ((a.flags() & py::array::c_style) != 0) return a;
  }
  py::array a = as_contiguous(obj, fn, what);
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') {
    detail::throw_invalid(fn, std::string(what) + " must hold real numbers, dtype", std::string(py::str(a.dtype())));
  }
  return py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
}

/// Checks that `a` has `ndim` dimensions.
inline void need_ndim(const py::array& a, py::ssize_t ndim, std::string_view fn, std::string_view what) {
  if (a.ndim() != ndim) {
    detail::throw_invalid(fn, std::string(what) + " must have " + std::to_string(ndim) + " dimension(s), ndim",
                          a.ndim());
  }
}

/// Checks that `a` has `n` elements.
inline void need_size(const py::array& a, std::size_t n, std::string_view fn, std::string_view what) {
  if (static_cast<std::size_t>(a.size()) != n) {
    detail::throw_invalid(fn, std::string(what) + " must have " + std::to_string(n) + " elements", a.size());
  }
}

/// Checks every value is finite (and >= 0 when `non_negative`).
template <class T>
void need_finite(std::span<const T> v, std::string_view fn, std::string_view what, bool non_negative) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || (non_negative && v[i] < T{0})) {
      detail::throw_invalid(fn,
                            std::string(what) + (non_negative ? " must be finite and >= 0" : " must be finite") +
                                ", element " + std::to_string(i),
                            v[i]);
    }
  }
}

/// The span of a typed contiguous array.
template <class T>
std::span<const T> span_of(const py::array_t<T, py::array::c_style>& a) {
  return {a.data(), static_cast<std::size_t>(a.size())};
}

/// A new 1-D numpy array holding `v`.
template <class T>
py::array_t<T> to_numpy(std::span<const T> v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

/// A numpy array that owns `v` (moved into a capsule): no copy of the data.
template <class T>
py::array_t<T> adopt(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), base);
}

}  // namespace moepolicy::python
