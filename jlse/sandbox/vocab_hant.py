"""Traditional-Chinese word lists (Big5-encodable) for the one traditional-Chinese site.

Only the ``phones`` topic exists in traditional script; the format is that of ``vocab_zh``.
"""

ADJECTIVES = """出色 優秀 穩定 流暢 清晰 明亮 輕薄 扎實 可靠 實用 均衡 亮眼 一般 普通 突出 細膩 耐用
高效 便宜 昂貴 精緻 舒適 靈敏 快速 安靜 準確 方便 強大 滿意 驚豔 合理"""

OVERLAP = """價格 評測 電池 螢幕 設計 品質 效能 性價比 保固 優惠 品牌 型號 評分 功能 更新 顯示 尺寸
重量 顏色 手感 預算 商城 配送 售後 口碑 規格 體驗"""

PEOPLE = "使用者 編輯 讀者 網友 玩家 消費者 評測團隊 朋友 專家 工程師 新手 老用戶"

TEMPLATES = (
    "{n}的{t}表現{a}，{o}也相當{a}。",
    "我們的{p}用了一週時間測試{t}和{t}。",
    "與上一代相比，{t}明顯更加{a}。",
    "很多{p}關心{t}是否值得這個{o}。",
    "日常使用中{t}保持{a}，{t}同樣{a}。",
    "{b}改進了{t}，但是{o}仍然可以更{a}。",
    "如果你看重{t}和{t}，這是一個{a}的選擇。",
    "在這個{o}下，很少有對手能提供如此{a}的{t}。",
    "我們多次測量了{t}，結果非常{a}。",
    "喜歡{a}{t}的{p}也可以看看{t}。",
    "經過兩週的測試，我們認為{t}{a}。",
    "{t}和{t}配合得很好，整體體驗{a}。",
    "{t}和{o}是選擇{n}的主要理由。",
    "有些{p}覺得{t}{a}，也有人希望{t}更好。",
    "總體來說，{n}提供了{a}的{t}和{a}的{o}。",
    "從{o}來看，{t}的優勢非常明顯。",
)

UI = {
    "home": "首頁", "about": "關於我們", "contact": "聯絡我們", "next": "下一頁", "prev": "上一頁",
    "more": "更多", "related": "相關文章", "print": "列印版", "admin": "管理後台", "ads": "廣告",
    "partners": "合作網站", "categories": "分類", "back": "返回{label}", "page": "第{n}頁",
    "read_more": "閱讀全文", "copyright": "版權所有", "login": "登入", "username": "帳號",
    "password": "密碼", "calendar": "活動日曆", "docs": "說明文件", "members": "會員中心",
    "directory": "網站導覽", "latest": "最新", "featured": "推薦", "specs": "規格",
    "review_title": "{name}評測", "list_title": "{label}", "article_more": "更多{label}",
    "follow": "到{site}閱讀全文", "portals": "入口網站", "price": "價格", "rating": "評分",
    "release": "上市時間", "address": "地址", "email": "電子郵件", "section_news": "{label}頻道",
    "all_sites": "分類網站大全", "deals": "熱門優惠", "not_found": "找不到網頁",
    "server_error": "伺服器內部錯誤", "slow": "緩慢網頁", "calendar_title": "{month}活動",
    "month_prev": "上個月", "month_next": "下個月", "archive": "彙整", "support": "客服中心",
}

TOPICS = {
    "phones": {
        "label": "手機",
        "terms": """手機 智慧型手機 觸控螢幕 處理器 晶片 記憶體 儲存空間 記憶卡 雙卡雙待 5G網路 4G網路
        藍牙 指紋辨識 臉部解鎖 主相機 前鏡頭 長焦鏡頭 超廣角 夜景模式 人像模式 錄影防手震 快充
        無線充電 充電器 傳輸線 耳機孔 揚聲器 震動馬達 安卓系統 作業系統 應用程式 通知 系統更新
        安全性更新 通話品質 訊號 天線 電信業者 月租方案 旗艦機 中階機 入門機 折疊手機 手機殼 保護貼
        玻璃機身 金屬邊框 防水 瀏海 邊框 像素密度 亮度 待機時間 通話時間 電池容量 省電模式 發熱
        跑分 遊戲模式 觸控筆 聯絡人 簡訊 鈴聲 熱點 漫遊 陀螺儀 定位 行動數據 單手操作 手機市場
        舊機換新 換機 拍照 自拍 續航力 防塵 喇叭 解析度 更新率 機身 電量 散熱 相機 鏡頭 效能 螢幕""",
        "categories": """qijian:旗艦手機, rumen:入門手機, paizhao:拍照手機, youxi:遊戲手機,
        zhedie:折疊手機, peijian:手機配件, 5g:5G手機, xiaoping:小螢幕手機""",
        "name_a": "華碩 宏達電 三星 蘋果 索尼 小米 夏普 諾基亞 摩托羅拉 華為",
        "name_b": "Zenfone U Galaxy iPhone Xperia 紅米 Aquos X G Edge",
        "numbered": True,
        "keywords": "手機 智慧型手機",
    },
}
