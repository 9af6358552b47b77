# SPDX-License-Identifier: BSD-3-Clause
"""User tools built on the compiler: the ``ethosu-ng`` CLI, the JSON/HTML compile report and the
model sources the CLI accepts. The compiler core never imports this package."""
