# (Imported first so that APOLLO_NATIVE, read by the apollo package, can load the compiled
# modules of this package in place of its Python: apollo.tools.native.)
import apollo  # noqa: F401
