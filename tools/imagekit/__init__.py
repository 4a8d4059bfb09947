"""The library behind tools/images.py: recipes of every image the stack runs on a machine
that cannot pull (the project's own, base-image stand-ins, runtime stand-ins), builds keyed
by a hash of what each is built from, archives kept in the cache, and loading into
containerd. docs/images.md says how it is used and where each stand-in differs."""
