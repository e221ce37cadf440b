"""Scripts to read and run as files (`python -m course_lib.launch -n 2 <path>`), shipped with
the package so that they are there wherever the course is installed (Colab included)."""
