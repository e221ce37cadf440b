"""`python -m course_lib.grade`: see `course_lib.grade.cli`."""

import sys

from course_lib.grade.cli import main

sys.exit(main())
