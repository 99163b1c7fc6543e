"""pmm: the library under pmctl and pmd.

The pieces both tools use: the kernel module's ABI (`uapi`) and device
(`device`), the records' models (`model`), the /proc readers (`procfs`,
`procsampler`), the leak detector (`trend`), the sample store (`store`), the
event decoder (`genl`), symbolization (`symbolize`) and the hook's launchers
(`run`, `attach`). Errors are `errors.PmmError`s; the front ends turn them into
messages and exit codes.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pmm")
except PackageNotFoundError:  # a source tree without an install
    __version__ = "0.0.0+unknown"
