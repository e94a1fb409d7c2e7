"""Scripts and harnesses around the operator (none ships); a package, so all of it imports by package path."""
