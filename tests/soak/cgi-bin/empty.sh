#!/bin/sh
# No output at all: the server answers 502, the one 5xx the soak intends.
exit 0
