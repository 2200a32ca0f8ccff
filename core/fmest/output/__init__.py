"""What people and machines read: a finished report as JSON, CSV, a table or HTML
(:mod:`fmest.output.report`), aligned tables and progress (:mod:`fmest.output.render`), the
serving summary lines (:mod:`fmest.output.serving_summary`) and the picture
(:mod:`fmest.output.plot`). Nothing here estimates."""
