"""English formats: ISO-like dates, a 24-hour clock with seconds and the time zone (UTC)."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
YEAR_MONTH_FORMAT = "F Y"
MONTH_DAY_FORMAT = "F j"
FIRST_DAY_OF_WEEK = 1  # Monday
