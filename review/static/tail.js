// The live tail: follows the records that meet the page's filters as the node writes them.
// Every value is set with textContent, never parsed as HTML: hosts, paths and commands are what
// a sandbox chose.
(function () {
  "use strict";
  var table = document.getElementById("tail");
  if (!table) {
    return;
  }
  var body = table.tBodies[0];
  var status = document.getElementById("tail-status");
  var maxRows = 1000;
  var shown = 0;

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) {
      td.className = cls;
    }
    tr.appendChild(td);
    return td;
  }

  var source = new EventSource(table.getAttribute("data-source"));
  source.addEventListener("open", function () {
    status.textContent = "Following: new records that meet these filters appear below as they are written.";
  });
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) {
      // The node answered with an error: the session ended, or the live tails this node
      // serves (to this key, or to tenants' keys) are all open.
      status.textContent = "The node refused to follow (the session may have ended, or its live tails are all open); reload the page to try again.";
      return;
    }
    status.textContent = "The stream was interrupted; reconnecting where it left off…";
  });
  source.addEventListener("problem", function (ev) {
    status.textContent = ev.data;
  });
  source.addEventListener("ended", function (ev) {
    source.close();
    status.textContent = ev.data;
  });
  source.addEventListener("record", function (ev) {
    var r = JSON.parse(ev.data);
    var tr = document.createElement("tr");
    tr.className = "record";
    tr.setAttribute("data-seq", String(r.seq));
    if (r.decision) {
      tr.classList.add(r.decision === "deny" ? "deny" : "allow");
    }
    cell(tr, String(r.seq));
    cell(tr, r.time);
    cell(tr, r.kind);
    cell(tr, r.lease);
    cell(tr, r.what, "what");
    cell(tr, r.decision + (r.flagged ? " (flagged)" : ""));
    var why = cell(tr, (r.rule ? r.rule + " " : "") + r.why, "why");
    if (r.allowing) {
      var small = document.createElement("small");
      small.className = "allowing";
      small.textContent = " would be allowed by: " + r.allowing;
      why.appendChild(small);
    }
    body.appendChild(tr);
    shown++;
    if (body.rows.length > maxRows) {
      body.deleteRow(0);
    }
    status.textContent = "Following: " + shown + " new record(s) so far.";
  });
})();
