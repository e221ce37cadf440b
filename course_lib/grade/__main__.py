"""`python -m course_lib.grade`: see `course_lib.grade.cli`."""

import sys

from course_lib.grade.cli import main

if __name__ == "__main__":
    sys.exit(main())
