// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// newlib 3.3's printf has no z, t or j length modifiers: "%zu" prints
// literally and does not consume its argument, so every later argument
// shifts. ExecuTorch's ET_LOG formats through vsnprintf with "%zu"
// throughout; the image links with -Wl,--wrap=vsnprintf and this rewrites
// the format (z and t: size_t and ptrdiff_t are int-sized here; j: long long)
// before newlib sees it.
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

int __real_vsnprintf(char* buf, size_t size, const char* fmt, va_list ap);

_Static_assert(sizeof(size_t) == sizeof(unsigned int), "z is rewritten to nothing");
_Static_assert(sizeof(ptrdiff_t) == sizeof(int), "t is rewritten to nothing");

int __wrap_vsnprintf(char* buf, size_t size, const char* fmt, va_list ap) {
  char out[512];
  size_t o = 0;
  const size_t n = strlen(fmt);
  if (n >= sizeof(out) / 2) {
    return __real_vsnprintf(buf, size, fmt, ap); // j doubles in size at most
  }
  for (size_t i = 0; i < n;) {
    out[o++] = fmt[i++];
    if (fmt[i - 1] != '%') {
      continue;
    }
    if (i < n && fmt[i] == '%') {
      out[o++] = fmt[i++];
      continue;
    }
    while (i < n && strchr("-+ #0123456789.*", fmt[i]) != NULL) {
      out[o++] = fmt[i++];
    }
    if (i < n && (fmt[i] == 'z' || fmt[i] == 't')) {
      ++i;
    } else if (i < n && fmt[i] == 'j') {
      ++i;
      out[o++] = 'l';
      out[o++] = 'l';
    }
  }
  out[o] = '\0';
  return __real_vsnprintf(buf, size, out, ap);
}
