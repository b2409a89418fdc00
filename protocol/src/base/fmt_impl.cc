// fmt's compiled part, built once. Every other file includes fmt's headers without
// FMT_HEADER_ONLY: with it, each translation unit compiled fmt's whole implementation again
// (about half of a typical file's compile time, measured). Linked statically into remora_base
// with hidden visibility, so no binary needs libfmt.so at run time and the shim exports no
// fmt symbol that could meet an application's own fmt (PyTorch ships one).
//
// The explicit instantiations are those fmt's headers declare `extern` (or leave undefined)
// when FMT_HEADER_ONLY is not set, for fmt 9 (Debian 12's libfmt-dev).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

#ifndef FMT_STATIC_THOUSANDS_SEPARATOR
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
